package pglock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
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

// BenchmarkHotKeyWait measures fairness on one hot key: 32 goroutines run
// lock.Do on it over and over (fn returns at once), through one locker on
// a pool of 32 connections, with the back-off of the comparison
// benchmarks (2ms doubling to 50ms) and with lock.Do's default (100ms
// doubling to 2s). Each op is one completed Do; the metrics are its p50
// and p99 duration (the wait for the lock, plus one acquire and one
// release) and completed cycles per second. "watch" is the locker itself,
// whose waiters are woken by the release's notification; "poll" hides its
// Watch method, so that waiters sleep out their back-off.
func BenchmarkHotKeyWait(b *testing.B) {
	for _, watch := range []bool{true, false} {
		name := "watch"
		if !watch {
			name = "poll"
		}
		for _, bo := range hotBackoffs {
			b.Run("backoff="+bo.name+"/"+name, func(b *testing.B) {
				srv := testenv.Postgres(b)
				l, err := New(newPool(b, srv.URL, 32), tables(b, newPool(b, srv.URL, 1))...)
				if err != nil {
					b.Fatal(err)
				}
				var subject lock.Locker = l
				if !watch {
					subject = pollOnly{l, l}
				}
				hotKeyWaits(b, 32, subject, bo.backoff)
			})
		}
	}
}

// hotBackoffs are the back-offs of BenchmarkHotKeyWait: the comparison
// benchmarks' (2ms doubling to 50ms) and lock.Do's default (100ms doubling
// to 2s).
var hotBackoffs = []struct {
	name    string
	backoff idemkit.Backoff
}{
	{"2ms-50ms", idemkit.Backoff{Base: 2 * time.Millisecond, Max: 50 * time.Millisecond}},
	{"100ms-2s", idemkit.Backoff{Base: 100 * time.Millisecond, Max: 2 * time.Second}},
}

// pollOnly is a locker without its Watch method.
type pollOnly struct {
	lock.Locker
	lock.KeyedLocker
}

// hotKeyWaits runs b.N lock.Do calls on one key spread over workers
// goroutines and reports their p50 and p99 durations and the cycles per
// second.
func hotKeyWaits(b *testing.B, workers int, l lock.Locker, backoff idemkit.Backoff) {
	b.Helper()
	opts := []lock.Option{
		lock.WithTTL(10 * time.Second), lock.WithTimeout(30 * time.Second), lock.WithRenewInterval(-1),
		lock.WithBackoff(backoff),
	}
	var (
		next  atomic.Int64
		mu    sync.Mutex
		waits []time.Duration
		wg    sync.WaitGroup
	)
	errs := make(chan error, workers)
	b.ResetTimer()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			for next.Add(1) <= int64(b.N) {
				start := time.Now()
				if err := lock.Do(context.Background(), l, "bench/hot", func(context.Context, lock.Lease) error { return nil }, opts...); err != nil {
					errs <- err
					return
				}
				local = append(local, time.Since(start))
			}
			mu.Lock()
			waits = append(waits, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	slices.Sort(waits)
	at := func(p float64) float64 {
		return float64(waits[min(len(waits)-1, int(float64(len(waits))*p))]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
	b.ReportMetric(float64(len(waits))/b.Elapsed().Seconds(), "cycles/s")
}
