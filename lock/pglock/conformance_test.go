package pglock

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/locktest"
	"github.com/idemkit/idemkit/lock/pglock/pgtest"
)

// A locker can be built on a connection shared by goroutines.
var _ DB = (*pgtest.SerialConn)(nil)

// margin is the suite's ε on the real server clock: comfortably more than
// a round trip to a local server under -race.
const margin = 100 * time.Millisecond

// TestConformance runs the lock suite on a locker built on a
// *pgxpool.Pool, the usual client. Every case gets its own schema, tables
// and pool; the restart case gets a server of its own.
func TestConformance(t *testing.T) {
	locktest.Run(t, func(t *testing.T, cfg locktest.Config) *locktest.Env {
		srv := testenv.Postgres(t)
		if needsRestart(t) {
			srv = testenv.NewPostgres(t)
		}
		admin := pgtest.NewPool(t, srv.URL, 2)
		opts := tables(t, admin)
		pool := pgtest.NewPool(t, srv.URL, 8)
		l, err := New(pool, append(opts, WithCleanupInIsLocked(cfg.CleanupInIsLocked), WithLogger(cfg.Logger))...)
		if err != nil {
			t.Fatal(err)
		}
		p := newProbes(t, admin, opts)
		env := &locktest.Env{
			Locker: l, Margin: margin,
			RaiseFence: p.raiseFence, Fence: p.fence, Stored: p.stored,
			Break:           pool.Close,
			ExpiresNatively: false, // expired rows stay until replaced, swept or cleaned up
		}
		if needsRestart(t) {
			env.Restart = func(t *testing.T) {
				srv.Restart(t)
				pool.Reset() // drop the connections the restart broke
				admin.Reset()
			}
		}
		return env
	})
}

// TestConformanceConn runs the lock suite on a locker built on a single
// *pgx.Conn. A connection serves one statement at a time and the suite
// races goroutines, so the connection is shared through
// pgtest.SerialConn, which only adds a mutex around each call; every
// statement still runs on the real connection.
func TestConformanceConn(t *testing.T) {
	locktest.Run(t, func(t *testing.T, cfg locktest.Config) *locktest.Env {
		srv := testenv.Postgres(t)
		if needsRestart(t) {
			srv = testenv.NewPostgres(t)
		}
		admin := pgtest.NewPool(t, srv.URL, 2)
		opts := tables(t, admin)
		sc := pgtest.NewSerialConn(pgtest.Connect(t, srv.URL))
		l, err := New(sc, append(opts, WithCleanupInIsLocked(cfg.CleanupInIsLocked), WithLogger(cfg.Logger))...)
		if err != nil {
			t.Fatal(err)
		}
		p := newProbes(t, admin, opts)
		env := &locktest.Env{
			Locker: l, Margin: margin,
			RaiseFence: p.raiseFence, Fence: p.fence, Stored: p.stored,
			Break:           sc.Close,
			ExpiresNatively: false,
		}
		if needsRestart(t) {
			env.Restart = func(t *testing.T) {
				srv.Restart(t)
				admin.Reset()
				sc.Swap(pgtest.Connect(t, srv.URL)) // a new connection to the restarted server
			}
		}
		return env
	})
}
