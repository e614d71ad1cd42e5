package pglock

import (
	"context"
	_ "embed"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idemkit"
)

// defaultTable is the lock table's name unless [WithTable] sets another.
const defaultTable = "idemkit_locks"

// schemaLockID is the key of the transaction-scoped advisory lock that
// [SetupSchema] holds while it runs its DDL, so that processes starting
// together do not race on CREATE TABLE IF NOT EXISTS: the big-endian int64
// of the ASCII bytes "idemkit!". schema.sql names it in its header.
const schemaLockID int64 = 0x6964656d6b697421

//go:embed schema.sql
var schemaSQL string

// SchemaSQL returns the DDL that [SetupSchema] runs with the default table
// name, as shipped in this package's schema.sql, for migration tools
// (goose, golang-migrate, Atlas, Flyway, ...). It is idempotent (IF NOT
// EXISTS throughout). With another table name, call SetupSchema or edit a
// copy of the file.
func SchemaSQL() string { return schemaSQL }

// ddl is the schema, with placeholders for the quoted names. schema.sql is
// this text rendered with the default name, below a comment header; a test
// keeps the two in step.
const ddl = `-- Lock records: one row per key that is locked, was locked and has not
-- been removed yet, or keeps a released lease's fence (a tombstone). A
-- lease is live while clock_timestamp() < expires_at by the server clock;
-- acquire replaces an expired lease or a tombstone, release and extend
-- refuse an expired lease. A row is deleted (by Sweep, a release or
-- IsLocked's optional cleanup) only once the clock has passed its fence read
-- as Unix milliseconds, so the next fence of its key, the greater of the
-- previous fence + 1 and the clock in Unix milliseconds, is always greater.
CREATE TABLE IF NOT EXISTS {{locks}} (
    -- provider.StorageKey of the normalised key: "k:" + the key when it is
    -- valid UTF-8 without NUL and short, else "h:" + its SHA-256.
    key         text        PRIMARY KEY,
    -- The lease's lock id (22 base64url characters); NULL in a tombstone.
    lock_id     text,
    -- The lease's fence, or a tombstone's: the last fence issued for the
    -- key. The check refuses, atomically, the acquire that would pass
    -- idemkit.FenceMax.
    fence       bigint      NOT NULL CONSTRAINT {{locks_fence_max}} CHECK (fence <= {{fence_max}}),
    acquired_at timestamptz NOT NULL,
    -- The row's expiry: the lease's end, or for a tombstone the instant the
    -- clock passes its fence. Sweep deletes the rows past it.
    expires_at  timestamptz NOT NULL,
    -- The normalised key when key holds its hash, else NULL.
    user_key    bytea
);
-- Release, extend and lookup by lock id.
CREATE UNIQUE INDEX IF NOT EXISTS {{locks_lock_id}} ON {{locks}} (lock_id);
-- Sweep: the expired rows, oldest first, without a scan of the table.
CREATE INDEX IF NOT EXISTS {{locks_expires_at}} ON {{locks}} (expires_at);
`

// renderDDL fills ddl with the name n.
func renderDDL(n tableName) string {
	return strings.NewReplacer(
		"{{locks}}", n.sanitize(),
		"{{locks_lock_id}}", n.derived("_lock_id_key"),
		"{{locks_expires_at}}", n.derived("_expires_at_idx"),
		"{{locks_fence_max}}", n.derived("_fence_max"),
		"{{fence_max}}", strconv.FormatUint(idemkit.FenceMax.Uint64(), 10),
	).Replace(ddl)
}

// SetupSchema creates the lock table and its indexes if they do not exist,
// with the table name set by opts ([WithTable]; other options are
// ignored). It is idempotent and safe to run concurrently from several
// processes: it runs its DDL in one transaction that first takes a
// transaction-scoped advisory lock (the number schema.sql names), so that
// setups started together queue up instead of racing. An invalid name is
// refused with InvalidArgument before any SQL is sent. It does not change
// a table of that name that exists in another layout.
//
// db may be a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx (the table then
// exists when that transaction commits).
func SetupSchema(ctx context.Context, db DB, opts ...Option) error {
	const op = "setup-schema"
	cfg, err := newConfig(opts)
	if err != nil {
		return err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return mapError(ctx, op, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", schemaLockID); err != nil {
		return mapError(ctx, op, err)
	}
	if _, err := tx.Exec(ctx, renderDDL(cfg.table)); err != nil {
		return mapError(ctx, op, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return mapError(ctx, op, err)
	}
	return nil
}

// identPart is one part of a table name: a letter or underscore, then
// letters, digits and underscores.
var identPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Identifier limits. PostgreSQL truncates identifiers to 63 bytes; a table
// part is shorter so that the index names derived from it (the table name
// plus "_expires_at_idx") fit too.
const (
	maxSchemaLen = 63
	maxTableLen  = 48
)

// tableName is a validated table name, optionally schema-qualified: every
// name it renders is quoted, so no table name can inject SQL and its case
// is kept.
type tableName struct {
	schema, table string
}

// parseTableName validates name: "table" or "schema.table", each part a
// letter or underscore followed by letters, digits and underscores, the
// table part at most 48 bytes (so that the names derived from it stay
// within PostgreSQL's 63) and the schema at most 63.
func parseTableName(name string) (tableName, error) {
	bad := func(detail string) (tableName, error) {
		return tableName{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", fmt.Sprintf("lock table %q: %s", name, detail), nil)
	}
	schema, table, qualified := strings.Cut(name, ".")
	if !qualified {
		schema, table = "", name
	}
	switch {
	case qualified && !identPart.MatchString(schema):
		return bad("the schema must match [A-Za-z_][A-Za-z0-9_]*")
	case len(schema) > maxSchemaLen:
		return bad(fmt.Sprintf("the schema exceeds %d bytes", maxSchemaLen))
	case !identPart.MatchString(table):
		return bad(`the name must be "table" or "schema.table", each matching [A-Za-z_][A-Za-z0-9_]*`)
	case len(table) > maxTableLen:
		return bad(fmt.Sprintf("the table name exceeds %d bytes", maxTableLen))
	}
	return tableName{schema: schema, table: table}, nil
}

// sanitize returns the quoted, possibly schema-qualified name, for SQL.
func (n tableName) sanitize() string {
	if n.schema == "" {
		return pgx.Identifier{n.table}.Sanitize()
	}
	return pgx.Identifier{n.schema, n.table}.Sanitize()
}

// derived returns the quoted name of an index or constraint of the table:
// the table part plus suffix (such as "_expires_at_idx"), unqualified, as
// CREATE INDEX and CONSTRAINT take it (the object lives in the table's
// schema).
func (n tableName) derived(suffix string) string {
	return pgx.Identifier{n.table + suffix}.Sanitize()
}
