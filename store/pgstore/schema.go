package pgstore

import (
	"context"
	_ "embed"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idemkit/lock"
)

// DefaultTable is the default name of the record table.
const DefaultTable = "idemkit_records"

// SchemaLockID is the key of the transaction-scoped advisory lock
// (pg_advisory_xact_lock) that [SetupSchema] holds while it runs its DDL,
// so that processes starting together do not race on CREATE TABLE IF NOT
// EXISTS. pglock's SetupSchema uses the same key. It is the big-endian
// int64 of the ASCII bytes "idemkit!".
const SchemaLockID int64 = 0x6964656d6b697421

//go:embed schema.sql
var schemaSQL string

// SchemaSQL returns the DDL that [SetupSchema] runs with the default table
// name, as shipped in this package's schema.sql, for migration tools. It is
// idempotent (IF NOT EXISTS throughout).
func SchemaSQL() string { return schemaSQL }

// ddl is the schema with a placeholder for the quoted names. schema.sql is
// this text rendered with the default name, below a comment header; a test
// keeps the two in step.
const ddl = `-- Records: the outcome of each execution, one row per record key. A row
-- whose expires_at has passed (by the server clock) is invisible to Get, is
-- replaced by any Put, and is deleted by Sweep.
CREATE TABLE IF NOT EXISTS {{records}} (
    -- lock.StorageKey of the record key: "k:" + the key when it is valid
    -- UTF-8 without NUL and short, else "h:" + its SHA-256.
    key         text        PRIMARY KEY,
    -- The request's fingerprint, as the caller gave it.
    fingerprint bytea       NOT NULL,
    -- store.State: 1 completed, 2 executed but not replayable.
    state       smallint    NOT NULL,
    -- The encoded response (empty when not replayable).
    response    bytea       NOT NULL,
    -- The fence of the lease that wrote the record.
    fence       bigint      NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
-- Sweep: the expired rows, oldest first, without a scan of the table.
CREATE INDEX IF NOT EXISTS {{records_expires_at}} ON {{records}} (expires_at);
`

// renderDDL fills ddl with the name t.
func renderDDL(t ident) string {
	return strings.NewReplacer(
		"{{records}}", t.sanitize(),
		"{{records_expires_at}}", t.index("_expires_at_idx"),
	).Replace(ddl)
}

// SetupSchema creates the record table and its index if they do not exist,
// with the table name set by opts ([WithTable]; other options are
// ignored). It is idempotent and safe to run concurrently from several
// processes: it runs the DDL in one transaction that holds the advisory
// lock [SchemaLockID]. An invalid name is refused with InvalidArgument
// before any SQL is sent.
func SetupSchema(ctx context.Context, db DB, opts ...Option) error {
	const op = "setup-schema"
	cfg, err := newConfig(opts)
	if err != nil {
		return err
	}
	if err := lock.CheckContext(ctx, op); err != nil {
		return err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return mapError(ctx, op, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", SchemaLockID); err != nil {
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

// identPart is one part of a table name.
var identPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Identifier limits: PostgreSQL truncates identifiers to 63 bytes; the
// table part is shorter so that the index name derived from it fits too.
const (
	maxSchemaLen = 63
	maxTableLen  = 48
)

// ident is a validated table name, optionally schema-qualified.
type ident struct {
	schema, table string
}

// parseIdent validates a table name: "table" or "schema.table", each part
// matching identPart. Names are always quoted, so their case is kept.
func parseIdent(what, s string) (ident, error) {
	bad := func(detail string) (ident, error) {
		return ident{}, lock.NewError(lock.CodeInvalidArgument, "new", fmt.Sprintf("%s %q: %s", what, s, detail), nil)
	}
	schema, table, qualified := strings.Cut(s, ".")
	if !qualified {
		schema, table = "", s
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
	return ident{schema: schema, table: table}, nil
}

// sanitize returns the quoted, possibly qualified name.
func (i ident) sanitize() string {
	if i.schema == "" {
		return pgx.Identifier{i.table}.Sanitize()
	}
	return pgx.Identifier{i.schema, i.table}.Sanitize()
}

// index returns the quoted name of an index on the table.
func (i ident) index(suffix string) string {
	return pgx.Identifier{i.table + suffix}.Sanitize()
}
