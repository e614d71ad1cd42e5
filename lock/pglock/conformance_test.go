package pglock

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/locktest"
)

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
		admin := newPool(t, srv.URL, 2)
		opts := tables(t, admin)
		pool := newPool(t, srv.URL, 8)
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
// races goroutines, so the connection is shared through serialConn, which
// only adds a mutex around each call; every statement still runs on the
// real connection.
func TestConformanceConn(t *testing.T) {
	locktest.Run(t, func(t *testing.T, cfg locktest.Config) *locktest.Env {
		srv := testenv.Postgres(t)
		if needsRestart(t) {
			srv = testenv.NewPostgres(t)
		}
		admin := newPool(t, srv.URL, 2)
		opts := tables(t, admin)
		conn := connect(t, srv.URL)
		sc := &serialConn{conn: conn}
		l, err := New(sc, append(opts, WithCleanupInIsLocked(cfg.CleanupInIsLocked), WithLogger(cfg.Logger))...)
		if err != nil {
			t.Fatal(err)
		}
		p := newProbes(t, admin, opts)
		env := &locktest.Env{
			Locker: l, Margin: margin,
			RaiseFence: p.raiseFence, Fence: p.fence, Stored: p.stored,
			Break:           func() { sc.swap(nil) },
			ExpiresNatively: false,
		}
		if needsRestart(t) {
			env.Restart = func(t *testing.T) {
				srv.Restart(t)
				admin.Reset()
				sc.swap(connect(t, srv.URL)) // a new connection to the restarted server
			}
		}
		return env
	})
}

// connect opens one connection, closed when the test ends.
func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}
