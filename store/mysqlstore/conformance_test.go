package mysqlstore

import (
	"context"
	"strings"
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

// TestConformanceAnyDSN runs the store suite on a pool whose DSN changes
// what the driver and the session do: affected rows counted as found
// rows, arguments interpolated, times parsed, ANSI_QUOTES and
// NO_BACKSLASH_ESCAPES, and a session time zone far from UTC. The store
// sends the same statements and reads the same answers whatever they are.
func TestConformanceAnyDSN(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		srv, stall := server(t)
		admin := newDB(t, srv.DSN, 2, nil)
		opt := table(t, admin)
		var rt roundTrips
		dsn := srv.DSN + "?clientFoundRows=true&interpolateParams=true&parseTime=true" +
			"&sql_mode=%27ANSI_QUOTES,NO_BACKSLASH_ESCAPES,STRICT_ALL_TABLES%27&time_zone=%27%2B05:30%27"
		db := newDB(t, dsn, 8, nil)
		var tz, mode string
		if err := db.QueryRowContext(t.Context(), "SELECT @@session.time_zone, @@session.sql_mode").Scan(&tz, &mode); err != nil ||
			tz != "+05:30" || !strings.Contains(mode, "ANSI_QUOTES") || !strings.Contains(mode, "NO_BACKSLASH_ESCAPES") {
			t.Fatalf("the session: time zone %q, sql_mode %q, %v; want the DSN's", tz, mode, err)
		}
		db = newDB(t, dsn, 8, &rt)
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
