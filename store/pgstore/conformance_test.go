package pgstore

import (
	"testing"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/storetest"
)

// server returns the shared server, or a server of the case's own for the
// case that stalls it, with the function that stalls it (nil on the
// shared one).
func server(t *testing.T) (*testenv.PostgresServer, func() (resume func())) {
	if !ownServer(t) {
		return testenv.Postgres(t), nil
	}
	srv := testenv.NewPostgres(t)
	return srv, func() func() { return srv.Stall(t) }
}

// TestConformance runs the store suite on a store built on a
// *pgxpool.Pool, each case with its own schema, table and pool, its
// statements counted.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		srv, stall := server(t)
		admin := newPool(t, srv.URL, 2)
		opt := table(t, admin)
		var st statements
		pool := newPool(t, srv.URL, 8, traced(&st))
		s, err := New(pool, opt, WithMaxResponseBytes(1<<20))
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.Env{
			Store: s, Margin: margin, Break: pool.Close, Stall: stall, MaxResponseBytes: 1 << 20,
			RoundTrips: st.count, Keys: immortal(admin, s),
		}
	})
}

// TestConformanceConn runs the store suite on a store built on one
// *pgx.Conn, shared between the suite's goroutines through serialConn, its
// statements counted.
func TestConformanceConn(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		srv, stall := server(t)
		admin := newPool(t, srv.URL, 2)
		opt := table(t, admin)
		var st statements
		sc := newSerialConn(t, srv.URL, &st)
		s, err := New(sc, opt)
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.Env{
			Store: s, Margin: margin, Break: sc.Close, Stall: stall, MaxResponseBytes: defaultMaxResponseBytes,
			RoundTrips: st.count, Keys: immortal(admin, s),
		}
	})
}

// TestConformanceRecords runs the record-store suite (Get, Put, Delete)
// on a store built on a *pgxpool.Pool.
func TestConformanceRecords(t *testing.T) {
	storetest.RunRecords(t, func(t *testing.T) *storetest.RecordsEnv {
		srv := testenv.Postgres(t)
		admin := newPool(t, srv.URL, 2)
		opt := table(t, admin)
		pool := newPool(t, srv.URL, 8)
		s, err := New(pool, opt, WithMaxResponseBytes(1<<20))
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.RecordsEnv{Records: s, Margin: margin, Break: pool.Close, MaxResponseBytes: 1 << 20}
	})
}
