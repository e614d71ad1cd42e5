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
	"github.com/idemkit/idemkit/lock"
)

// Default table names.
const (
	DefaultTable      = "idemkit_locks"
	DefaultFenceTable = "idemkit_lock_fences"
)

// SchemaLockID is the key of the transaction-scoped advisory lock
// ([pg_advisory_xact_lock]) that [SetupSchema] holds while it runs its DDL,
// so that processes starting together do not race on CREATE TABLE IF NOT
// EXISTS. The same key serialises pgstore's SetupSchema. It is the
// big-endian int64 of the ASCII bytes "idemkit!".
//
// [pg_advisory_xact_lock]: https://www.postgresql.org/docs/current/functions-admin.html#FUNCTIONS-ADVISORY-LOCKS
const SchemaLockID int64 = 0x6964656d6b697421

//go:embed schema.sql
var schemaSQL string

// SchemaSQL returns the DDL that [SetupSchema] runs with the default table
// names, as shipped in this package's schema.sql, for migration tools
// (goose, golang-migrate, Atlas, Flyway, ...). It is idempotent (IF NOT
// EXISTS throughout). With other table names, call SetupSchema or edit a
// copy of the file.
func SchemaSQL() string { return schemaSQL }

// ddl is the schema, with placeholders for the quoted names. schema.sql is
// this text rendered with the default names, below a comment header; a test
// keeps the two in step.
const ddl = `-- Lock records: one row per key that is locked or was locked and not yet
-- deleted. A row whose expires_at has passed (by the server clock) is
-- expired: acquire replaces it, release and extend refuse it, and Sweep (or
-- IsLocked's optional cleanup) deletes it once it has been expired for
-- longer than lock.CleanupGrace.
CREATE TABLE IF NOT EXISTS {{locks}} (
    -- lock.StorageKey of the normalised key: "k:" + the key when it is
    -- valid UTF-8 without NUL and short, else "h:" + its SHA-256.
    key         text        PRIMARY KEY,
    -- The lease's lock id (22 base64url characters). The lease's fence is
    -- the key's fence counter: it moves only when a lease is granted.
    lock_id     text        NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    -- The normalised key when key holds its hash, else NULL.
    user_key    bytea
);
-- Release, extend and lookup by lock id.
CREATE UNIQUE INDEX IF NOT EXISTS {{locks_lock_id}} ON {{locks}} (lock_id);
-- Sweep: the expired rows, oldest first, without a scan of the table.
CREATE INDEX IF NOT EXISTS {{locks_expires_at}} ON {{locks}} (expires_at);

-- Fence counters: one row per key ever locked, never deleted (not by
-- release, expiry, cleanup or Sweep), so fences only grow.
CREATE TABLE IF NOT EXISTS {{fences}} (
    -- The same storage key as the lock table's.
    key   text   PRIMARY KEY,
    -- The last fence issued for the key. The check refuses, atomically,
    -- the acquire that would pass lock.FenceMax.
    fence bigint NOT NULL CONSTRAINT {{fences_max}} CHECK (fence <= {{fence_max}})
);
`

// renderDDL fills ddl with the names of n.
func renderDDL(n names) string {
	return strings.NewReplacer(
		"{{locks}}", n.locks.Sanitize(),
		"{{locks_lock_id}}", n.locks.Derived("_lock_id_key"),
		"{{locks_expires_at}}", n.locks.Derived("_expires_at_idx"),
		"{{fences}}", n.fences.Sanitize(),
		"{{fences_max}}", n.fences.Derived("_fence_max"),
		"{{fence_max}}", strconv.FormatUint(lock.FenceMax.Uint64(), 10),
	).Replace(ddl)
}

// SetupSchema creates the lock and fence-counter tables and their indexes
// if they do not exist, with the table names set by opts ([WithTable],
// [WithFenceTable]; other options are ignored). It is idempotent and safe
// to run concurrently from several processes: it runs the DDL through
// [SetupDDL], in one transaction that holds the advisory lock
// [SchemaLockID]. Invalid names are refused with InvalidArgument before any
// SQL is sent.
//
// db may be a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx (the tables then exist
// when that transaction commits).
func SetupSchema(ctx context.Context, db DB, opts ...Option) error {
	cfg, err := newConfig(opts)
	if err != nil {
		return err
	}
	return SetupDDL(ctx, db, renderDDL(cfg.names))
}

// SetupDDL runs ddl, idempotent DDL (CREATE ... IF NOT EXISTS throughout),
// in one transaction on db that first takes the transaction-scoped advisory
// lock [SchemaLockID], so that setups run by processes starting together
// queue up instead of racing on CREATE TABLE IF NOT EXISTS (which can fail
// when another transaction creates the same table). An ended ctx fails it
// before any SQL is sent; other failures are mapped by [MapError] with op
// "setup-schema". On a pgx.Tx it runs in a savepoint, and the DDL takes
// effect when that transaction commits.
//
// [SetupSchema] runs the locker's DDL through it. It is exported as a
// building block for a store that keeps its tables next to the locker's
// (pgstore's SetupSchema runs its DDL through it, under the same lock).
func SetupDDL(ctx context.Context, db DB, ddl string) error {
	const op = "setup-schema"
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return MapError(ctx, op, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", SchemaLockID); err != nil {
		return MapError(ctx, op, err)
	}
	if _, err := tx.Exec(ctx, ddl); err != nil {
		return MapError(ctx, op, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return MapError(ctx, op, err)
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

// TableName is a validated table name, optionally schema-qualified, ready
// to be put into SQL: every name it renders is quoted, so no table name can
// inject SQL and its case is kept. Get one from [ParseTableName]; the zero
// TableName names no table.
//
// It is exported as a building block for a store that names its tables the
// way the locker does ([WithTable]); pgstore's WithTable is validated by it.
type TableName struct {
	schema, table string
}

// ParseTableName validates name: "table" or "schema.table", each part a
// letter or underscore followed by letters, digits and underscores, the
// table part at most 48 bytes (so that the names derived from it, such as
// "<table>_expires_at_idx", stay within PostgreSQL's 63) and the schema at
// most 63. Anything else is refused with an InvalidArgument error (op
// "new") whose detail starts with what ("lock table", "record table")
// and the quoted name.
func ParseTableName(what, name string) (TableName, error) {
	bad := func(detail string) (TableName, error) {
		return TableName{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", fmt.Sprintf("%s %q: %s", what, name, detail), nil)
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
	return TableName{schema: schema, table: table}, nil
}

// Sanitize returns the quoted, possibly schema-qualified name, for SQL.
func (n TableName) Sanitize() string {
	if n.schema == "" {
		return pgx.Identifier{n.table}.Sanitize()
	}
	return pgx.Identifier{n.schema, n.table}.Sanitize()
}

// Derived returns the quoted name of an index or constraint of the table:
// the table part plus suffix (such as "_expires_at_idx"), unqualified, as
// CREATE INDEX and CONSTRAINT take it (the object lives in the table's
// schema).
func (n TableName) Derived(suffix string) string {
	return pgx.Identifier{n.table + suffix}.Sanitize()
}

// same reports whether n and m may name the same table: equal table parts
// in equal schemas, or with either schema left to the search path.
func (n TableName) same(m TableName) bool {
	return n.table == m.table && (n.schema == m.schema || n.schema == "" || m.schema == "")
}

// names are the locker's tables.
type names struct {
	locks, fences TableName
}
