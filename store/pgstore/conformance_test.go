package pgstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/storetest"
)

// margin is the suite's ε on the real server clock.
const margin = 100 * time.Millisecond

// TestConformance runs the store suite on a store built on a
// *pgxpool.Pool, each case with its own schema, table and pool.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		srv := testenv.Postgres(t)
		admin := newPool(t, srv.URL, 2)
		opt := table(t, admin)
		pool := newPool(t, srv.URL, 8)
		s, err := New(pool, opt, WithMaxResponseBytes(1<<20))
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.Env{Store: s, Margin: margin, Break: pool.Close, MaxResponseBytes: 1 << 20}
	})
}

// TestConformanceConn runs the store suite on a store built on one
// *pgx.Conn, shared between the suite's goroutines through serialConn.
func TestConformanceConn(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		srv := testenv.Postgres(t)
		admin := newPool(t, srv.URL, 2)
		opt := table(t, admin)
		sc := &serialConn{conn: connect(t, srv.URL)}
		s, err := New(sc, opt)
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.Env{Store: s, Margin: margin, Break: sc.close, MaxResponseBytes: DefaultMaxResponseBytes}
	})
}

// serialConn lets goroutines share one *pgx.Conn, which serves one
// statement at a time, by holding a mutex from each call until its result
// is consumed. It only serialises; every statement runs on the real
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

func (s *serialConn) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
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
