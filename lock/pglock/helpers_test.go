package pglock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// newPool connects a pool of at most conns connections to url, closed when
// the test ends.
func newPool(t testing.TB, url string, conns int32) *pgxpool.Pool {
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

// tables creates a schema of the test's own on the server behind admin and
// the lock tables in it, and returns the options that name them.
func tables(t testing.TB, admin DB) []Option {
	t.Helper()
	schema := testenv.Name(t)
	ctx := context.Background()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	opts := []Option{WithTable(schema + ".locks"), WithFenceTable(schema + ".fences")}
	if err := SetupSchema(ctx, admin, opts...); err != nil {
		t.Fatalf("SetupSchema: %v", err)
	}
	return opts
}

// probes reads and writes the tables of a locker behind its back, for the
// conformance suite's Env.
type probes struct {
	db DB
	n  names
}

func newProbes(t testing.TB, db DB, opts []Option) probes {
	cfg, err := newConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	return probes{db: db, n: cfg.names}
}

func (p probes) raiseFence(ctx context.Context, key string, f lock.Fence) error {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return err
	}
	sk, _ := storageKey(key)
	tag, err := p.db.Exec(ctx, "INSERT INTO "+p.n.fences.Sanitize()+` AS f (key, fence) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence WHERE f.fence < EXCLUDED.fence`, sk, int64(f))
	if err == nil && tag.RowsAffected() != 1 {
		err = lock.NewError(lock.CodeInvalidArgument, "raise-fence", "a fence counter can only be raised", nil)
	}
	return err
}

func (p probes) fence(ctx context.Context, key string) (lock.Fence, error) {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return 0, err
	}
	sk, _ := storageKey(key)
	var f int64
	err = p.db.QueryRow(ctx, "SELECT fence FROM "+p.n.fences.Sanitize()+" WHERE key = $1", sk).Scan(&f)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return lock.Fence(f), err
}

func (p probes) stored(ctx context.Context, key string) (bool, error) {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return false, err
	}
	sk, _ := storageKey(key)
	var ok bool
	err = p.db.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+p.n.locks.Sanitize()+" WHERE key = $1)", sk).Scan(&ok)
	return ok, err
}

// rows counts the rows of a table.
func (p probes) rows(t testing.TB, table TableName) int {
	t.Helper()
	var n int
	if err := p.db.QueryRow(context.Background(), "SELECT count(*) FROM "+table.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// needsRestart reports whether a conformance case restarts the server, and
// so needs one of its own.
func needsRestart(t *testing.T) bool { return strings.Contains(t.Name(), "/SG10_") }

// serialConn lets goroutines share one *pgx.Conn, which serves one
// statement at a time, by holding a mutex from each call until its result
// is consumed: a Row scanned, a Tx committed or rolled back.
// It only serialises; every statement still goes through the real
// connection.
type serialConn struct {
	mu   sync.Mutex
	conn *pgx.Conn
}

var _ DB = (*serialConn)(nil)

func (s *serialConn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn.Exec(ctx, sql, args...)
}

func (s *serialConn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	s.mu.Lock()
	return serialRow{row: s.conn.QueryRow(ctx, sql, args...), unlock: s.mu.Unlock}
}

func (s *serialConn) Begin(ctx context.Context) (pgx.Tx, error) {
	s.mu.Lock()
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	return &serialTx{Tx: tx, unlock: sync.OnceFunc(s.mu.Unlock)}, nil
}

// swap closes the connection and, if next is not nil, puts next in its
// place.
func (s *serialConn) swap(next *pgx.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.conn.Close(context.Background())
	if next != nil {
		s.conn = next
	}
}

type serialRow struct {
	row    pgx.Row
	unlock func()
}

func (r serialRow) Scan(dest ...any) error {
	defer r.unlock()
	return r.row.Scan(dest...)
}

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
