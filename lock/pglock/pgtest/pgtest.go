package pgtest

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/testenv"
)

// NewPool connects a pool of at most conns connections to url, closed when
// the test ends. It fails the test if url does not parse or the pool
// cannot be built.
func NewPool(t testing.TB, url string, conns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Connect opens one connection to url, closed when the test ends. It fails
// the test if the connection cannot be made.
func Connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// Execer is the part of a client that [Schema] uses. A *pgxpool.Pool, a
// *pgx.Conn and a pgx.Tx have it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Schema creates a schema of the test's own through db and returns its
// name: short, unique within the process and across runs, and made of
// [a-z0-9_] only, so that it needs no quoting in a table name such as
// schema+".locks". The schema is left in place when the test ends.
func Schema(t testing.TB, db Execer) string {
	t.Helper()
	schema := testenv.Name(t)
	if _, err := db.Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	return schema
}

// SerialConn lets goroutines share one *pgx.Conn, which serves one
// statement at a time, by holding a mutex from each call until its result
// is consumed: a Row scanned, a Tx committed or rolled back. It only
// serialises; every statement still runs on the real connection. It has
// the methods of pglock.DB, so a locker or a store can be built on it and
// raced like one built on a pool.
type SerialConn struct {
	mu   sync.Mutex
	conn *pgx.Conn
}

// NewSerialConn returns a SerialConn on conn.
func NewSerialConn(conn *pgx.Conn) *SerialConn { return &SerialConn{conn: conn} }

// Exec runs sql on the connection once no other call holds it.
func (s *SerialConn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn.Exec(ctx, sql, args...)
}

// QueryRow runs sql on the connection once no other call holds it, and
// holds it until the row is scanned.
func (s *SerialConn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	s.mu.Lock()
	return serialRow{row: s.conn.QueryRow(ctx, sql, args...), unlock: s.mu.Unlock}
}

// Begin starts a transaction on the connection once no other call holds
// it, and holds it until the transaction is committed or rolled back.
func (s *SerialConn) Begin(ctx context.Context) (pgx.Tx, error) {
	s.mu.Lock()
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	return &serialTx{Tx: tx, unlock: sync.OnceFunc(s.mu.Unlock)}, nil
}

// Swap closes the connection and, if next is not nil, puts next in its
// place, for example a connection to a restarted server. It waits for the
// call that holds the connection to finish.
func (s *SerialConn) Swap(next *pgx.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.conn.Close(context.Background())
	if next != nil {
		s.conn = next
	}
}

// Close closes the connection, so that every later call fails as on a lost
// connection: Swap(nil).
func (s *SerialConn) Close() { s.Swap(nil) }

// serialRow releases its SerialConn when it is scanned.
type serialRow struct {
	row    pgx.Row
	unlock func()
}

func (r serialRow) Scan(dest ...any) error {
	defer r.unlock()
	return r.row.Scan(dest...)
}

// serialTx releases its SerialConn when it ends.
type serialTx struct {
	pgx.Tx
	unlock func()
}

func (t *serialTx) Commit(ctx context.Context) error {
	defer t.unlock()
	return t.Tx.Commit(ctx)
}

func (t *serialTx) Rollback(ctx context.Context) error {
	defer t.unlock()
	return t.Tx.Rollback(ctx)
}
