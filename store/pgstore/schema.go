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
// EXISTS: the big-endian int64 of the ASCII bytes "idemkit!".
const schemaLockID int64 = 0x6964656d6b697421

//go:embed schema.sql
var schemaSQL string

// SchemaSQL returns the DDL that [SetupSchema] runs with the default table
// name, as shipped in this package's schema.sql, for migration tools. It is
// idempotent (IF NOT EXISTS throughout).
func SchemaSQL() string { return schemaSQL }

// lockIDRows is the predicate of the partial index on lock ids, as
// schema.sql spells it. FindClaim repeats it word for word, so that the
// planner proves the index usable.
const lockIDRows = `octet_length(fingerprint) = 22 AND encode(fingerprint, 'escape') ~ '^[A-Za-z0-9_-]{22}$'`

// renderDDL returns schema.sql with the names of table t.
func renderDDL(t tableName) string {
	return strings.NewReplacer(
		`"`+defaultTable+`"`, t.sanitize(),
		`"`+defaultTable+`_keep_until_idx"`, t.derived("_keep_until_idx"),
		`"`+defaultTable+`_lock_id_idx"`, t.derived("_lock_id_idx"),
	).Replace(schemaSQL)
}

// SetupSchema creates the record table and its indexes if they do not
// exist, with the table name set by opts ([WithTable]; other options are
// ignored). It is idempotent and safe to run from several processes at
// once: one statement batch, one implicit transaction that first takes
// pg_advisory_xact_lock(7594306392281412641). On a pgx.Tx the DDL takes
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
