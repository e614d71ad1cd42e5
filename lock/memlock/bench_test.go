package memlock_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/memlock"
)

// BenchmarkAcquireRelease: one acquire+release cycle on a free key, one
// goroutine.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	l := memlock.New()
	b.ReportAllocs()
	for b.Loop() {
		lease, ok, err := l.Acquire(ctx, "bench:key", time.Minute)
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
		if out, err := l.Release(ctx, lease.ID); err != nil || !out.OK {
			b.Fatal(out, err)
		}
	}
}

// BenchmarkAcquireReleaseDistinctKeys: cycles on ever-new keys, as an
// idempotency guard makes them (one key per request).
func BenchmarkAcquireReleaseDistinctKeys(b *testing.B) {
	ctx := context.Background()
	l := memlock.New()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		lease, ok, err := l.Acquire(ctx, "bench:"+strconv.Itoa(i), time.Minute)
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
		if _, err := l.Release(ctx, lease.ID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHotKeyTryLock: 8 goroutines hammer one key with single-attempt
// acquires; each op is one attempt, and only successful ones release.
// Reports the share of attempts that won.
func BenchmarkHotKeyTryLock(b *testing.B) {
	ctx := context.Background()
	l := memlock.New()
	var wins, tries atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8 / max(1, testingProcs()))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tries.Add(1)
			lease, ok, err := l.Acquire(ctx, "hot", time.Minute)
			if err != nil {
				b.Error(err)
				return
			}
			if ok {
				wins.Add(1)
				_, _ = l.Release(ctx, lease.ID)
			}
		}
	})
	b.ReportMetric(float64(wins.Load())/float64(max(1, tries.Load())), "wins/try")
}

// BenchmarkHotKeyDo: 8 goroutines each run lock.Do on one key (waiting by
// release notification); each op is one completed critical section.
func BenchmarkHotKeyDo(b *testing.B) {
	ctx := context.Background()
	l := memlock.New()
	b.ReportAllocs()
	b.SetParallelism(8 / max(1, testingProcs()))
	fn := func(context.Context, lock.Lease) error { return nil }
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := lock.Do(ctx, l, "hot", fn, lock.WithTimeout(time.Minute), lock.WithRenewInterval(-1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// testingProcs is GOMAXPROCS, which RunParallel multiplies by the
// parallelism: 8 goroutines in all on any machine with up to 8 procs.
func testingProcs() int { return runtime.GOMAXPROCS(0) }
