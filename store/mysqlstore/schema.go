package mysqlstore

import (
	"context"
	"database/sql"
	_ "embed"
	"strings"

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
// one connection: idempotent, and safe from several processes at once. An
// invalid name is InvalidArgument before any SQL. DDL commits by itself in
// MySQL: on a *sql.Tx, the caller's transaction is committed.
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
	for _, stmt := range statements(cfg.table) {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return mapError(ctx, op, err)
		}
	}
	return nil
}
