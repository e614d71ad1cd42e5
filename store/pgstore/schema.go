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

// schemaLockID is the advisory lock [SetupSchema] holds, so that processes
// starting together do not race on CREATE ... IF NOT EXISTS: "idemkit!".
const schemaLockID int64 = 0x6964656d6b697421

//go:embed schema.sql
var schemaSQL string

// SchemaSQL returns schema.sql, the idempotent DDL [SetupSchema] runs for
// the default table name, for migration tools.
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
		`"`+defaultTable+`_claim"`, t.claimFunc(),
		quoteLiteral("idemkit:"+defaultTable), quoteLiteral(t.channel()),
	).Replace(schemaSQL)
}

// SetupSchema runs schema.sql for the table named by opts ([WithTable]),
// creating what does not exist, in one transaction that first takes
// pg_advisory_xact_lock(7594306392281412641): idempotent, and safe from
// several processes at once. An invalid name is InvalidArgument before
// any SQL.
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
