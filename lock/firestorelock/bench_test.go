package firestorelock_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// BenchmarkHotKeyWait measures fairness on one hot key: 32 goroutines run
// lock.Do on it over and over (fn returns at once), through one locker on
// the emulator, with the back-off of the comparison benchmarks (2ms
// doubling to 50ms) and with lock.Do's default (100ms doubling to 2s).
// Each op is one completed Do; the metrics are its p50 and p99 duration
// (the wait for the lock, plus one acquire and one release) and completed
// cycles per second. "watch" is the locker itself, whose waiters are woken
// by the key's snapshot listener; "poll" hides its Watch method, so that
// waiters sleep out their back-off.
func BenchmarkHotKeyWait(b *testing.B) {
	for _, watch := range []bool{true, false} {
		name := "watch"
		if !watch {
			name = "poll"
		}
		for _, bo := range hotBackoffs {
			b.Run("backoff="+bo.name+"/"+name, func(b *testing.B) {
				l := newLocker(b, project(b))
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
