package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// margin is the ε of real-clock tests on the test server.
const margin = 100 * time.Millisecond

// roundTrips counts what the connections of a connector send that the
// server answers: statements (text or prepared), prepares, BEGIN, COMMIT,
// ROLLBACK and pings. Every statement of the store is one COM_QUERY (no
// arguments), so that a call is one round trip.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) count() int { return int(r.n.Load()) }

type countingConnector struct {
	driver.Connector
	rt *roundTrips
}

func (c countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{conn: conn, rt: c.rt}, nil
}

type countingConn struct {
	conn driver.Conn
	rt   *roundTrips
}

func (c *countingConn) Prepare(query string) (driver.Stmt, error) {
	c.rt.n.Add(1)
	return c.conn.Prepare(query)
}

func (c *countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.rt.n.Add(1)
	return c.conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c *countingConn) Close() error { return c.conn.Close() }

func (c *countingConn) Begin() (driver.Tx, error) { panic("database/sql calls BeginTx") }

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.rt.n.Add(1)
	tx, err := c.conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return countingTx{tx, c.rt}, nil
}

func (c *countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.rt.n.Add(1)
	return c.conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c *countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.rt.n.Add(1)
	return c.conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *countingConn) Ping(ctx context.Context) error {
	c.rt.n.Add(1)
	return c.conn.(driver.Pinger).Ping(ctx)
}

func (c *countingConn) ResetSession(ctx context.Context) error {
	return c.conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *countingConn) IsValid() bool { return c.conn.(driver.Validator).IsValid() }

func (c *countingConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

type countingTx struct {
	tx driver.Tx
	rt *roundTrips
}

func (t countingTx) Commit() error {
	t.rt.n.Add(1)
	return t.tx.Commit()
}

func (t countingTx) Rollback() error {
	t.rt.n.Add(1)
	return t.tx.Rollback()
}

// newDB opens a pool of at most conns connections to dsn, closed when the
// test ends, its round trips counted in rt when rt is not nil.
func newDB(t testing.TB, dsn string, conns int, rt *roundTrips) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rt != nil {
		connector = countingConnector{connector, rt}
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// newDatabase creates a database of the test's own and returns its name,
// made of [a-z0-9_] only.
func newDatabase(t testing.TB, admin DB) string {
	t.Helper()
	name := testenv.Name(t)
	if _, err := admin.ExecContext(context.Background(), "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatalf("create database: %v", err)
	}
	return name
}

// table creates a record table in a database of the test's own and
// returns the option that names it.
func table(t testing.TB, admin DB) Option {
	t.Helper()
	opt := WithTable(newDatabase(t, admin) + ".records")
	if err := SetupSchema(context.Background(), admin, opt); err != nil {
		t.Fatalf("SetupSchema: %v", err)
	}
	return opt
}

// tableOf returns the quoted table name a store uses.
func tableOf(s *Store) string { return s.cfg.table.quoted() }

// immortal returns the keys of the rows of s's table with no finite
// expiry or keep-until time: NULL, or past 10^18 µs (the year 33658), above
// what any fence (at most idemkit.FenceMax ms) plus a clock step reaches.
func immortal(admin *sql.DB, s *Store) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		rows, err := admin.QueryContext(ctx, `SELECT record_key FROM `+tableOf(s)+`
			WHERE expires_at IS NULL OR keep_until IS NULL OR expires_at > 1000000000000000000 OR keep_until > 1000000000000000000`)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var keys []string
		for rows.Next() {
			var k []byte
			if err := rows.Scan(&k); err != nil {
				return nil, err
			}
			keys = append(keys, string(k))
		}
		return keys, rows.Err()
	}
}

// ownServer reports whether the conformance case t needs a server of its
// own: the case that stalls its server (every other case shares one).
func ownServer(t *testing.T) bool { return strings.Contains(t.Name(), "Stall") }
