package pglock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/testenv"
)

// The cycle benchmarks measure acquire+release on pglock and, side by side,
// pg_try_advisory_lock + pg_advisory_unlock on the same server: the ceiling
// of a lock that writes nothing to disk. Each runs with 1 and with 16
// workers, each worker on its own connection, on a key of its own
// ("distinct") or all on one key ("hot", where a cycle is one attempt and
// only the successful ones count). The metric cycles/s counts completed
// acquire+release cycles.
//
// Against the test server (fsync off) the numbers flatter pglock, whose
// acquire commits durably; point IDEMKIT_POSTGRES_URL at a server with
// fsync on to compare them honestly.
func BenchmarkCycle(b *testing.B) {
	for _, c := range []struct {
		name    string
		workers int
		hot     bool
	}{{"conns=1", 1, false}, {"conns=16", 16, false}, {"conns=16/hot-key", 16, true}} {
		b.Run("pglock/"+c.name, func(b *testing.B) {
			srv := testenv.Postgres(b)
			pool := newPool(b, srv.URL, int32(c.workers))
			l, err := New(pool, tables(b, newPool(b, srv.URL, 1))...)
			if err != nil {
				b.Fatal(err)
			}
			cycles(b, c.workers, c.hot, func(ctx context.Context, key string) (bool, error) {
				lease, ok, err := l.Acquire(ctx, key, time.Minute)
				if err != nil || !ok {
					return false, err
				}
				_, err = l.ReleaseKey(ctx, lease.Key, lease.ID)
				return true, err
			})
		})
		b.Run("advisory/"+c.name, func(b *testing.B) {
			pool := newPool(b, testenv.Postgres(b).URL, int32(c.workers))
			conns := make(chan *pgxpool.Conn, c.workers)
			for range c.workers {
				conn, err := pool.Acquire(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Release()
				conns <- conn
			}
			var mu sync.Mutex
			byKey := make(map[string]*pgxpool.Conn)
			cycles(b, c.workers, c.hot, func(ctx context.Context, key string) (bool, error) {
				// A session lock: every worker keeps its own connection.
				mu.Lock()
				conn := byKey[key+fmt.Sprint(ctx.Value(workerKey{}))]
				if conn == nil {
					conn = <-conns
					byKey[key+fmt.Sprint(ctx.Value(workerKey{}))] = conn
				}
				mu.Unlock()
				var ok bool
				if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", key).Scan(&ok); err != nil || !ok {
					return false, err
				}
				_, err := conn.Exec(ctx, "SELECT pg_advisory_unlock(hashtextextended($1, 0))", key)
				return true, err
			})
		})
	}
}

type workerKey struct{}

// cycles runs b.N attempts of cycle spread over workers goroutines, each
// with its own key unless hot, and reports completed cycles per second.
func cycles(b *testing.B, workers int, hot bool, cycle func(ctx context.Context, key string) (bool, error)) {
	b.Helper()
	var next, done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	b.ReportAllocs()
	b.ResetTimer()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.WithValue(context.Background(), workerKey{}, w)
			key := fmt.Sprintf("bench/%d", w)
			if hot {
				key = "bench/hot"
			}
			for next.Add(1) <= int64(b.N) {
				ok, err := cycle(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(done.Load())/b.Elapsed().Seconds(), "cycles/s")
}

// BenchmarkContendedAcquire measures an acquire that finds the key held:
// one read, nothing written.
func BenchmarkContendedAcquire(b *testing.B) {
	srv := testenv.Postgres(b)
	l, err := New(newPool(b, srv.URL, 1), tables(b, newPool(b, srv.URL, 1))...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, ok, err := l.Acquire(ctx, "held", time.Hour); err != nil || !ok {
		b.Fatal(ok, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, ok, err := l.Acquire(ctx, "held", time.Hour); err != nil || ok {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkExtend measures a renewal: one durable UPDATE by key and id.
func BenchmarkExtend(b *testing.B) {
	srv := testenv.Postgres(b)
	l, err := New(newPool(b, srv.URL, 1), tables(b, newPool(b, srv.URL, 1))...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	lease, ok, err := l.Acquire(ctx, "held", time.Hour)
	if err != nil || !ok {
		b.Fatal(ok, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if out, err := l.ExtendKey(ctx, lease.Key, lease.ID, time.Hour); err != nil || !out.OK {
			b.Fatal(out, err)
		}
	}
}
