package mysqlstore

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/storetest"
)

// server returns the shared server, or a server of the case's own for the
// case that stalls it, with the function that stalls it (nil on the
// shared one).
func server(t *testing.T) (*testenv.MySQLServer, func() (resume func())) {
	if !ownServer(t) {
		return testenv.MySQL(t), nil
	}
	srv := testenv.NewMySQL(t)
	return srv, func() func() { return srv.Stall(t) }
}

// TestConformance runs the store suite on a store built on a *sql.DB,
// each case with its own database, table and pool, its round trips
// counted.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		srv, stall := server(t)
		admin := newDB(t, srv.DSN, 2, nil)
		opt := table(t, admin)
		var rt roundTrips
		db := newDB(t, srv.DSN, 8, &rt)
		s, err := New(db, opt, WithMaxResponseBytes(1<<20))
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.Env{
			Store: s, Margin: margin, Break: func() { _ = db.Close() }, Stall: stall, MaxResponseBytes: 1 << 20,
			RoundTrips: rt.count, Keys: immortal(admin, s),
		}
	})
}

// TestConformanceRecords runs the record-store suite (Get, Put, Delete)
// on a store built on a *sql.DB.
func TestConformanceRecords(t *testing.T) {
	storetest.RunRecords(t, func(t *testing.T) *storetest.RecordsEnv {
		srv := testenv.MySQL(t)
		admin := newDB(t, srv.DSN, 2, nil)
		opt := table(t, admin)
		db := newDB(t, srv.DSN, 8, nil)
		s, err := New(db, opt, WithMaxResponseBytes(1<<20))
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.RecordsEnv{Records: s, Margin: margin, Break: func() { _ = db.Close() }, MaxResponseBytes: 1 << 20}
	})
}

// TestConformanceClock runs the conformance suite's clock case on a server
// of its own whose clock the case steps back, sweeping where a sweeper
// would.
func TestConformanceClock(t *testing.T) {
	storetest.RunClock(t, func(t *testing.T) *storetest.Env {
		clock := testenv.NewClock(t)
		srv := testenv.NewMySQLWithClock(t, clock)
		admin := newDB(t, srv.DSN, 2, nil)
		opt := table(t, admin)
		db := newDB(t, srv.DSN, 8, nil)
		s, err := New(db, opt)
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.Env{
			Store: s, Margin: margin, Break: func() { _ = db.Close() },
			ShiftClock: func(_ *testing.T, d time.Duration) { clock.Step(d) },
			Sweep: func(ctx context.Context) error {
				_, err := s.Sweep(ctx)
				return err
			},
		}
	})
}
