package pgstore

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/pglock/pgtest"
	"github.com/idemkit/idemkit/store/storetest"
)

// A store can be built on a connection shared by goroutines.
var _ DB = (*pgtest.SerialConn)(nil)

// margin is the suite's ε on the real server clock.
const margin = 100 * time.Millisecond

// TestConformance runs the store suite on a store built on a
// *pgxpool.Pool, each case with its own schema, table and pool.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		srv := testenv.Postgres(t)
		admin := pgtest.NewPool(t, srv.URL, 2)
		opt := table(t, admin)
		pool := pgtest.NewPool(t, srv.URL, 8)
		s, err := New(pool, opt, WithMaxResponseBytes(1<<20))
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.Env{Store: s, Margin: margin, Break: pool.Close, MaxResponseBytes: 1 << 20}
	})
}

// TestConformanceConn runs the store suite on a store built on one
// *pgx.Conn, shared between the suite's goroutines through pgtest.SerialConn.
func TestConformanceConn(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		srv := testenv.Postgres(t)
		admin := pgtest.NewPool(t, srv.URL, 2)
		opt := table(t, admin)
		sc := pgtest.NewSerialConn(pgtest.Connect(t, srv.URL))
		s, err := New(sc, opt)
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.Env{Store: s, Margin: margin, Break: sc.Close, MaxResponseBytes: DefaultMaxResponseBytes}
	})
}
