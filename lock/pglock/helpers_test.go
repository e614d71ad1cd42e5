package pglock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
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

// newSchema creates a schema of the test's own through db and returns its
// name, made of [a-z0-9_] only and unique across tests and runs.
func newSchema(t testing.TB, db DB) string {
	t.Helper()
	schema := testenv.Name(t)
	if _, err := db.Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	return schema
}

// tables creates a schema of the test's own on the server behind admin and
// the lock table in it, and returns the options that name it.
func tables(t testing.TB, admin DB) []Option {
	t.Helper()
	opts := []Option{WithTable(newSchema(t, admin) + ".locks")}
	if err := SetupSchema(context.Background(), admin, opts...); err != nil {
		t.Fatalf("SetupSchema: %v", err)
	}
	return opts
}

// probes reads and writes the table of a locker behind its back, for the
// conformance suite's Env and the package's own tests.
type probes struct {
	db    *pgxpool.Pool
	table tableName
}

func newProbes(t testing.TB, db *pgxpool.Pool, opts []Option) probes {
	cfg, err := newConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	return probes{db: db, table: cfg.table}
}

func probeKey(key string) (string, error) {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return "", err
	}
	sk, _ := storageKey(key)
	return sk, nil
}

// raiseFence stores a tombstone with fence f for key, which must be free
// (no live lease), expiring once the server clock passes f: the next lease
// of key gets a greater fence. It only raises.
func (p probes) raiseFence(ctx context.Context, key string, f idemkit.Fence) error {
	sk, err := probeKey(key)
	if err != nil {
		return err
	}
	tag, err := p.db.Exec(ctx, `INSERT INTO `+p.table.sanitize()+` AS l (key, lock_id, fence, acquired_at, expires_at)
		VALUES ($1, NULL, $2, clock_timestamp(), `+msTime("$2::bigint + 1")+`)
		ON CONFLICT (key) DO UPDATE SET lock_id = NULL, user_key = NULL, fence = EXCLUDED.fence, expires_at = EXCLUDED.expires_at
		WHERE l.fence < EXCLUDED.fence AND (l.lock_id IS NULL OR l.expires_at <= clock_timestamp())`, sk, int64(f))
	if err == nil && tag.RowsAffected() != 1 {
		err = idemkit.NewError(idemkit.CodeInvalidArgument, "raise-fence", "a fence can only be raised, on a free key", nil)
	}
	return err
}

// fence reads the fence of key's row (a lease or a tombstone), 0 without
// one.
func (p probes) fence(ctx context.Context, key string) (idemkit.Fence, error) {
	sk, err := probeKey(key)
	if err != nil {
		return 0, err
	}
	var f int64
	err = p.db.QueryRow(ctx, "SELECT fence FROM "+p.table.sanitize()+" WHERE key = $1", sk).Scan(&f)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return idemkit.Fence(f), err
}

// stored reports whether a lease (live or expired; not a tombstone) is kept
// for key.
func (p probes) stored(ctx context.Context, key string) (bool, error) {
	sk, err := probeKey(key)
	if err != nil {
		return false, err
	}
	var ok bool
	err = p.db.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+p.table.sanitize()+" WHERE key = $1 AND lock_id IS NOT NULL)", sk).Scan(&ok)
	return ok, err
}

// tombstone reports whether key's row is a tombstone.
func (p probes) tombstone(ctx context.Context, key string) (bool, error) {
	sk, err := probeKey(key)
	if err != nil {
		return false, err
	}
	var ok bool
	err = p.db.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+p.table.sanitize()+" WHERE key = $1 AND lock_id IS NULL)", sk).Scan(&ok)
	return ok, err
}

// keys lists the rows without a finite expiry (the column is NOT NULL, so
// none should ever be listed).
func (p probes) keys(ctx context.Context) ([]string, error) {
	rows, err := p.db.Query(ctx, "SELECT key FROM "+p.table.sanitize()+" WHERE expires_at IS NULL OR NOT isfinite(expires_at)")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// rows counts the rows of the table.
func (p probes) rows(t testing.TB) int {
	t.Helper()
	var n int
	if err := p.db.QueryRow(context.Background(), "SELECT count(*) FROM "+p.table.sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// serialConn lets goroutines share one *pgx.Conn, which serves one
// statement at a time, by holding a mutex from each call until its result
// is consumed: a Row scanned, a Tx committed or rolled back. It only
// serialises; every statement still runs on the real connection.
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

// Config returns the connection's settings, as *pgx.Conn does: the
// locker opens its listening connection with them.
func (s *serialConn) Config() *pgx.ConnConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn.Config()
}

// swap closes the connection and, if next is not nil, puts next in its
// place (a connection to a restarted server).
func (s *serialConn) swap(next *pgx.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.conn.Close(context.Background())
	if next != nil {
		s.conn = next
	}
}

// close closes the connection: every later call fails as on a lost
// connection.
func (s *serialConn) close() { s.swap(nil) }

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

// stall freezes srv, a server of the test's own, entirely: the postmaster
// through srv.Stall, and every process it forked (the backends serving
// open connections, the background workers) by SIGSTOP, since each
// PostgreSQL child runs in a session of its own (setsid) and so escapes a
// signal to the postmaster's process group. db is a pool on srv, used to
// find the postmaster. The returned function resumes everything; the
// test's cleanup does too.
func stall(t *testing.T, srv *testenv.PostgresServer, db *pgxpool.Pool) (resume func()) {
	t.Helper()
	var backend int
	if err := db.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		t.Fatal(err)
	}
	postmaster, err := parentOf(backend)
	if err != nil {
		t.Fatal(err)
	}
	resumeMaster := srv.Stall(t) // first, so that it forks no child meanwhile
	children, err := childrenOf(postmaster)
	if err != nil {
		resumeMaster()
		t.Fatal(err)
	}
	for _, pid := range children {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Errorf("stall: SIGSTOP %d: %v", pid, err)
		}
	}
	resume = sync.OnceFunc(func() {
		for _, pid := range children {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		resumeMaster()
	})
	t.Cleanup(resume)
	return resume
}

// parentOf returns the parent of process pid, from /proc.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	fields := strings.Fields(string(b[i+1:]))
	if i < 0 || len(fields) < 2 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, b)
	}
	return strconv.Atoi(fields[1])
}

// childrenOf returns the processes whose parent is pid.
func childrenOf(pid int) ([]int, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, err
	}
	var children []int
	for _, d := range dirs {
		child, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if parent, err := parentOf(child); err == nil && parent == pid {
			children = append(children, child)
		}
	}
	return children, nil
}
