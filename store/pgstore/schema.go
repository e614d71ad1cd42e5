package pgstore

import (
	"context"
	_ "embed"
	"strings"

	"github.com/idemkit/idemkit/lock/pglock"
)

// DefaultTable is the default name of the record table.
const DefaultTable = "idemkit_records"

// SchemaLockID is the key of the transaction-scoped advisory lock
// (pg_advisory_xact_lock) that [SetupSchema] holds while it runs its DDL,
// so that processes starting together do not race on CREATE TABLE IF NOT
// EXISTS: [pglock.SchemaLockID], which pglock's SetupSchema holds too. It
// is the big-endian int64 of the ASCII bytes "idemkit!".
const SchemaLockID = pglock.SchemaLockID

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
func renderDDL(t pglock.TableName) string {
	return strings.NewReplacer(
		"{{records}}", t.Sanitize(),
		"{{records_expires_at}}", t.Derived("_expires_at_idx"),
	).Replace(ddl)
}

// SetupSchema creates the record table and its index if they do not exist,
// with the table name set by opts ([WithTable]; other options are
// ignored). It is idempotent and safe to run concurrently from several
// processes: it runs the DDL with [pglock.SetupDDL], in one transaction
// that holds the advisory lock [SchemaLockID]. An invalid name is refused
// with InvalidArgument before any SQL is sent.
func SetupSchema(ctx context.Context, db DB, opts ...Option) error {
	cfg, err := newConfig(opts)
	if err != nil {
		return err
	}
	return pglock.SetupDDL(ctx, db, renderDDL(cfg.table))
}
