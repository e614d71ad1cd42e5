package pglock

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/locktest"
)

// margin is the suite's ε on the real server clock: comfortably more than
// a round trip to a local server under -race.
const margin = 100 * time.Millisecond

// TestConformance runs the lock suite on a locker built on a
// *pgxpool.Pool, the usual client. Every case gets its own schema, table
// and pool; the restart case gets a server of its own.
func TestConformance(t *testing.T) {
	locktest.Run(t, func(t *testing.T, cfg locktest.Config) *locktest.Env {
		srv := testenv.Postgres(t)
		if cfg.Restart {
			srv = testenv.NewPostgres(t)
		}
		admin := newPool(t, srv.URL, 2)
		opts := tables(t, admin)
		pool := newPool(t, srv.URL, 8)
		if err := pool.Ping(t.Context()); err != nil { // connect before the clock starts
			t.Fatal(err)
		}
		l, err := New(pool, append(opts, WithCleanupInIsLocked(cfg.CleanupInIsLocked), WithLogger(cfg.Logger))...)
		if err != nil {
			t.Fatal(err)
		}
		p := newProbes(t, admin, opts)
		env := &locktest.Env{
			Locker: l, Margin: margin,
			RaiseFence: p.raiseFence, Fence: p.fence, Stored: p.stored, Keys: p.keys,
			Break:           pool.Close,
			ExpiresNatively: false, // expired rows stay until replaced, swept or cleaned up
		}
		if cfg.Restart {
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
// races goroutines, so the connection is shared through serialConn, which
// only adds a mutex around each call; every statement still runs on the
// real connection.
func TestConformanceConn(t *testing.T) {
	locktest.Run(t, func(t *testing.T, cfg locktest.Config) *locktest.Env {
		srv := testenv.Postgres(t)
		if cfg.Restart {
			srv = testenv.NewPostgres(t)
		}
		admin := newPool(t, srv.URL, 2)
		opts := tables(t, admin)
		sc := &serialConn{conn: connect(t, srv.URL)}
		l, err := New(sc, append(opts, WithCleanupInIsLocked(cfg.CleanupInIsLocked), WithLogger(cfg.Logger))...)
		if err != nil {
			t.Fatal(err)
		}
		p := newProbes(t, admin, opts)
		env := &locktest.Env{
			Locker: l, Margin: margin,
			RaiseFence: p.raiseFence, Fence: p.fence, Stored: p.stored, Keys: p.keys,
			Break:           sc.close,
			ExpiresNatively: false,
		}
		if cfg.Restart {
			env.Restart = func(t *testing.T) {
				srv.Restart(t)
				admin.Reset()
				sc.swap(connect(t, srv.URL)) // a new connection to the restarted server
			}
		}
		return env
	})
}
