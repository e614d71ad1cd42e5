package mysqlstore

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit"
)

// defaultTable is the record table unless [WithTable] names another.
const defaultTable = "idemkit_records"

// schemaLock is the named lock [SetupSchema] holds, so that processes
// starting together do not race on CREATE … IF NOT EXISTS.
const schemaLock = "idemkit:schema"

//go:embed schema.sql
var schemaSQL string

// SchemaSQL returns schema.sql, the idempotent DDL [SetupSchema] runs for
// the default table name, for migration tools (as a script for the mariadb
// or mysql client: it sets DELIMITER around the procedure).
func SchemaSQL() string { return schemaSQL }

// statements returns the statements of schema.sql for table t, as the
// client would send them: split at the delimiter in effect, without
// comments or DELIMITER lines.
func statements(t tableName) []string {
	r := strings.NewReplacer(
		"`"+defaultTable+"_claim`", t.claimProc(),
		"`"+defaultTable+"_keep_until_idx`", "`"+t.table+"_keep_until_idx`",
		"`"+defaultTable+"_lock_id_idx`", "`"+t.table+"_lock_id_idx`",
		"`"+defaultTable+"`", t.quoted(),
	)
	var (
		out   []string
		cur   strings.Builder
		delim = ";"
	)
	for _, line := range strings.Split(r.Replace(schemaSQL), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "--") || (trimmed == "" && cur.Len() == 0):
			continue
		case strings.HasPrefix(trimmed, "DELIMITER "):
			delim = strings.TrimSpace(strings.TrimPrefix(trimmed, "DELIMITER "))
			continue
		}
		if strings.HasSuffix(trimmed, delim) {
			cur.WriteString(strings.TrimSuffix(strings.TrimRight(line, " \t"), delim))
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	return out
}

// conner is what a [DB] needs to give SetupSchema one connection: a *sql.DB
// has it.
type conner interface {
	Conn(ctx context.Context) (*sql.Conn, error)
}

// SetupSchema runs schema.sql for the table named by opts ([WithTable]),
// creating what does not exist, under GET_LOCK('idemkit:schema', 30) on
// one connection: idempotent, and safe from several processes at once. A
// table made before its steps columns existed gets them first, and its
// claim procedure is replaced (claims made during that fail with
// Misconfigured). An invalid name is InvalidArgument before any SQL. DDL
// commits by itself in MySQL: on a *sql.Tx, the caller's transaction is
// committed.
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
	if c, ok := db.(conner); ok {
		// The named lock belongs to a session: every statement on one.
		conn, err := c.Conn(ctx)
		if err != nil {
			return mapError(ctx, op, err)
		}
		defer conn.Close()
		db = conn
	}
	var got sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT GET_LOCK('"+schemaLock+"', 30)").Scan(&got); err != nil {
		return mapError(ctx, op, err)
	}
	if !got.Valid || got.Int64 != 1 {
		return idemkit.NewError(idemkit.CodeServiceUnavailable, op, "another process held the schema lock (GET_LOCK('"+schemaLock+"')) for 30 s", nil)
	}
	defer func() { _, _ = db.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK('"+schemaLock+"')") }()
	if err := upgrade(ctx, db, cfg.table); err != nil {
		return mapError(ctx, op, err)
	}
	for _, stmt := range statements(cfg.table) {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return mapError(ctx, op, err)
		}
	}
	return nil
}

// stepColumns are the columns schema.sql's table gained for steps, as it
// defines them, for [upgrade].
const stepColumns = "ADD COLUMN steps MEDIUMBLOB NULL, ADD COLUMN step_count TINYINT UNSIGNED NOT NULL DEFAULT 0"

// upgrade brings a table of t's name made before its steps columns
// existed to schema.sql's: it drops the claim procedure of that time
// first (schema.sql then creates the one that knows them: should the
// ALTER fail, the next SetupSchema starts over), then adds the columns,
// an instant ALTER on MariaDB 10.3+ and MySQL 8.0.29+. The server's own
// name resolution answers whether they are there (a query of the column
// that fails with error 1054); no table is nothing to upgrade.
func upgrade(ctx context.Context, db DB, t tableName) error {
	rows, err := db.QueryContext(ctx, "SELECT step_count FROM "+t.quoted()+" LIMIT 0")
	if err == nil {
		return rows.Close()
	}
	var me *mysql.MySQLError
	if !errors.As(err, &me) || (me.Number != erBadField && me.Number != erNoSuchTable) {
		return err
	}
	if me.Number == erNoSuchTable {
		return nil
	}
	if _, err := db.ExecContext(ctx, "DROP PROCEDURE IF EXISTS "+t.claimProc()); err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, "ALTER TABLE "+t.quoted()+" "+stepColumns)
	return err
}
