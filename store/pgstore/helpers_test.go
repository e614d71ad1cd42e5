package pgstore

import (
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/testenv"
)

// TestMain runs the package's tests, or, in a child process of
// TestKilledProcesses (killChildEnv set), that child's work alone.
func TestMain(m *testing.M) {
	if os.Getenv(killChildEnv) == "1" {
		os.Exit(killChildMain())
	}
	testenv.Main(m)
}

// margin is the ε of real-clock tests on the test server.
const margin = 100 * time.Millisecond

// statements counts the statements run on the connections whose config it
// traces (a pgx QueryTracer): with pgx's statement cache, one statement is
// one round trip once a connection has prepared it.
type statements struct{ n atomic.Int64 }

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *statements) count() int { return int(s.n.Load()) }

// poolOpts adjusts a test pool's config.
type poolOpt func(*pgxpool.Config)

// traced counts the pool's statements in s.
func traced(s *statements) poolOpt {
	return func(c *pgxpool.Config) { c.ConnConfig.Tracer = s }
}

// appName tags the pool's backends in pg_stat_activity.
func appName(name string) poolOpt {
	return func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = name }
}

// newPool connects a pool of at most conns connections to url, closed when
// the test ends.
func newPool(t testing.TB, url string, conns int32, opts ...poolOpt) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = conns
	for _, o := range opts {
		o(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// connect opens one connection to url, closed when the test ends.
func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// newSchema creates a schema of the test's own and returns its name, made
// of [a-z0-9_] only.
func newSchema(t testing.TB, db DB) string {
	t.Helper()
	schema := testenv.Name(t)
	if _, err := db.Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	return schema
}

// table creates a record table in a schema of the test's own and returns
// the option that names it.
func table(t testing.TB, admin DB) Option {
	t.Helper()
	opt := WithTable(newSchema(t, admin) + ".records")
	if err := SetupSchema(context.Background(), admin, opt); err != nil {
		t.Fatalf("SetupSchema: %v", err)
	}
	return opt
}

// tableOf returns the quoted table name a store uses.
func tableOf(s *Store) string { return s.cfg.table.sanitize() }

// immortal returns the stored keys of the rows of s's table with no finite
// expiry or keep-until time.
func immortal(admin *pgxpool.Pool, s *Store) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		rows, err := admin.Query(ctx, `SELECT key FROM `+tableOf(s)+`
			WHERE expires_at IS NULL OR keep_until IS NULL OR NOT isfinite(expires_at) OR NOT isfinite(keep_until)`)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	}
}

// serialConn lets goroutines share one *pgx.Conn, which serves one
// statement at a time, by holding a mutex from each call until its result
// is consumed. It only serialises; every statement runs on the real
// connection. Like an application on one connection, it opens a new one
// when pgx closed the last (a statement's ctx ended), until Close.
type serialConn struct {
	cfg    *pgx.ConnConfig
	mu     sync.Mutex
	conn   *pgx.Conn
	closed bool
}

// newSerialConn connects to url, its statements counted in st.
func newSerialConn(t testing.TB, url string, st *statements) *serialConn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tracer = st
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &serialConn{cfg: cfg, conn: conn}
	t.Cleanup(s.Close)
	return s
}

// current returns the connection, reopened if pgx closed it. s.mu is held.
func (s *serialConn) current(ctx context.Context) *pgx.Conn {
	if s.conn.IsClosed() && !s.closed {
		if c, err := pgx.ConnectConfig(ctx, s.cfg); err == nil {
			s.conn = c
		}
	}
	return s.conn
}

func (s *serialConn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current(ctx).Exec(ctx, sql, args...)
}

func (s *serialConn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	s.mu.Lock()
	return serialRow{row: s.current(ctx).QueryRow(ctx, sql, args...), unlock: s.mu.Unlock}
}

// Close closes the connection for good, so that every later call fails as
// on a lost connection.
func (s *serialConn) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	_ = s.conn.Close(context.Background())
}

type serialRow struct {
	row    pgx.Row
	unlock func()
}

func (r serialRow) Scan(dest ...any) error {
	defer r.unlock()
	return r.row.Scan(dest...)
}

// ownServer reports whether the conformance case t needs a server of its
// own: the case that stalls its server (every other case shares one).
func ownServer(t *testing.T) bool { return strings.Contains(t.Name(), "Stall") }
