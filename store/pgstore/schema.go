package pgstore

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/idemkit/idemkit"
)

// defaultTable is the record table unless [WithTable] names another.
const defaultTable = "idemkit_records"

// schemaLockID is the key of the transaction-scoped advisory lock
// (pg_advisory_xact_lock) that [SetupSchema] holds while it runs its DDL,
// so that processes starting together do not race on CREATE TABLE IF NOT
// EXISTS: the big-endian int64 of the ASCII bytes "idemkit!", the key
// pglock's setup holds too.
const schemaLockID int64 = 0x6964656d6b697421

//go:embed schema.sql
var schemaSQL string

// SchemaSQL returns the DDL that [SetupSchema] runs with the default table
// name, as shipped in this package's schema.sql, for migration tools. It is
// idempotent (IF NOT EXISTS throughout).
func SchemaSQL() string { return schemaSQL }

// ddl is the schema with placeholders for the quoted names. schema.sql is
// this text rendered with the default name, below a comment header; a test
// keeps the two in step.
const ddl = `-- Records: one row per record key, holding a claim while its request runs,
-- then the request's outcome. Time is the server's clock_timestamp(). A row
-- past its keep_until is deleted by Sweep (or taken over in place by a new
-- claim before that).
CREATE TABLE IF NOT EXISTS {{records}} (
    -- The record key itself when it is printable ASCII (0x20..0x7E) not
    -- starting with \x; otherwise \x followed by the hex of its bytes.
    key         text COLLATE "C" PRIMARY KEY,
    -- The request's fingerprint, as the caller gave it.
    fingerprint bytea       NOT NULL,
    -- 1 claimed, 2 completed, 3 executed but not replayable; 0 a tombstone
    -- (a released claim or a deleted record, kept only for its fence).
    state       smallint    NOT NULL,
    -- The encoded response when completed. Empty otherwise, except that a
    -- claim a duplicate waits for holds \x01 (its end then notifies).
    response    bytea       NOT NULL,
    -- The claim's fence: above every fence the key carried before.
    fence       bigint      NOT NULL,
    -- When the claim was made or the outcome written.
    created_at  timestamptz NOT NULL,
    -- A claim: when its lease runs out; an outcome: when it is forgotten.
    expires_at  timestamptz NOT NULL,
    -- When Sweep may delete the row: past expires_at (a claim: one minute
    -- past it), and past the fence read as Unix milliseconds plus the
    -- largest clock step (pgstore.WithMaxClockStep).
    keep_until  timestamptz NOT NULL
);
-- Sweep: the rows past keep_until, oldest first, without a scan of the table.
CREATE INDEX IF NOT EXISTS {{records_keep_until}} ON {{records}} (keep_until);
-- FindClaim: the rows whose fingerprint is a lock id (22 base64url
-- characters), by fingerprint. A guard's fingerprint never is one, so its
-- writes add no entry here.
CREATE INDEX IF NOT EXISTS {{records_lock_id}} ON {{records}} (fingerprint)
    WHERE ` + lockIDRows + `;
`

// lockIDRows is the predicate of the partial index on lock ids. FindClaim
// repeats it word for word, so that the planner proves the index usable.
const lockIDRows = `octet_length(fingerprint) = 22 AND encode(fingerprint, 'escape') ~ '^[A-Za-z0-9_-]{22}$'`

// renderDDL fills ddl with the name t.
func renderDDL(t tableName) string {
	return strings.NewReplacer(
		"{{records}}", t.sanitize(),
		"{{records_keep_until}}", t.derived("_keep_until_idx"),
		"{{records_lock_id}}", t.derived("_lock_id_idx"),
	).Replace(ddl)
}

// SetupSchema creates the record table and its index if they do not exist,
// with the table name set by opts ([WithTable]; other options are
// ignored). It is idempotent and safe to run concurrently from several
// processes: it sends the DDL in one statement batch, one implicit
// transaction that first takes a transaction-scoped advisory lock
// (pg_advisory_xact_lock(7594306392281412641)). On a pgx.Tx the DDL takes
// effect when that transaction commits. An invalid name is refused with
// InvalidArgument before any SQL is sent.
func SetupSchema(ctx context.Context, db DB, opts ...Option) error {
	const op = "setup-schema"
	cfg, err := newConfig(opts)
	if err != nil {
		return err
	}
	if db == nil {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, "a database client is required", nil)
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return err
	}
	// Without arguments pgx sends this as one simple query: its statements
	// run in one transaction, which holds the lock until it commits.
	batch := fmt.Sprintf("SELECT pg_advisory_xact_lock(%d);\n%s", schemaLockID, renderDDL(cfg.table))
	_, err = db.Exec(ctx, batch)
	return mapError(ctx, op, err)
}
