package memlock_test

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/memlock"
)

// TestNothingLeftOf500kKeys: 500,000 distinct keys (50,000 with -short),
// one per request as an idempotency guard makes them, go through the
// locker while its clock moves on; every other lease is released, the
// rest are left to expire, and some keys are watched. The locker holds
// about what the last few seconds made (records within their lease and the
// cleanup grace after it, tombstones whose fence the clock has not passed)
// and, once their time has passed, nothing of these keys: no record,
// tombstone, lock id or watcher.
func TestNothingLeftOf500kKeys(t *testing.T) {
	keys := 500_000
	if testing.Short() {
		keys /= 10
	}
	const (
		ttl  = time.Second
		step = 100 * time.Microsecond // ten keys a millisecond
	)
	// The unreleased keys of the last lease and cleanup grace are kept
	// (15,000); a sweep runs once as many acquires again have been made,
	// each adding a record or a tombstone.
	window := int((ttl + lock.CleanupGrace) / step)
	bound := window + 2*memlock.MinSweep
	ctx := t.Context()
	clock := fakeclock.New()
	l := memlock.New(memlock.WithClock(clock.Now))
	key := func(i int) string {
		return "idempotency:" + strconv.FormatUint(uint64(i)|1<<44, 16) + "-4000-8000-0000-000000000000"
	}

	inUse0, rss0 := heapInUse(), testenv.RSS()
	start := time.Now()
	peak := 0
	for i := range keys {
		lease, ok, err := l.Acquire(ctx, key(i), ttl)
		if err != nil || !ok {
			t.Fatalf("acquire %d: %v, %v", i, ok, err)
		}
		var woken <-chan struct{}
		var stop func()
		switch i % 1000 {
		case 0: // watched until released
			woken, stop = l.Watch(ctx, key(i))
		case 1: // watched for a while, then left to expire
			_, stop = l.Watch(ctx, key(i))
			stop()
		}
		if i%2 == 0 {
			if out, err := l.Release(ctx, lease.ID); err != nil || !out.OK {
				t.Fatalf("release %d: %+v, %v", i, out, err)
			}
		}
		if woken != nil {
			select {
			case <-woken:
			default:
				t.Fatalf("release %d did not wake its watcher", i)
			}
			stop()
		}
		clock.Advance(step)
		entries, ids := l.Size()
		if entries > bound || ids > entries {
			t.Fatalf("after %d keys: %d records and tombstones, %d lock ids held; want at most %d", i+1, entries, ids, bound)
		}
		peak = max(peak, entries)
	}
	elapsed := time.Since(start)
	entries, ids := l.Size()
	t.Logf("%d keys in %v: at most %d records and tombstones held (bound %d); at the end %d, with %d lock ids",
		keys, elapsed.Round(time.Millisecond), peak, bound, entries, ids)

	// Once every lease has run out, its cleanup grace passed and the
	// clock passed every fence, the locker's next sweep drops them all: it
	// comes within as many acquires as it holds.
	clock.Advance(ttl + lock.CleanupGrace + time.Millisecond)
	sweptAfter := 0
	for n := range max(entries, memlock.MinSweep) + 1 {
		lease, ok, err := l.Acquire(ctx, "probe", time.Millisecond)
		if err != nil || !ok {
			t.Fatalf("probe %d: %v, %v", n, ok, err)
		}
		if out, err := l.Release(ctx, lease.ID); err != nil || !out.OK {
			t.Fatalf("probe release %d: %+v, %v", n, out, err)
		}
		clock.Advance(time.Millisecond)
		if e, _ := l.Size(); e <= 1 {
			sweptAfter = n + 1
			break
		}
	}
	entries, ids = l.Size()
	if entries > 1 || ids != 0 || l.Watched() != 0 {
		t.Fatalf("%d records and tombstones, %d lock ids and %d watched keys held once everything expired; want at most the probe's tombstone", entries, ids, l.Watched())
	}
	if l.Fence("probe") == 0 && entries == 1 {
		t.Fatalf("the one entry held is not the probe's")
	}
	for i := 0; i < keys; i += 997 {
		if l.Stored(key(i)) || l.Fence(key(i)) != 0 {
			t.Fatalf("key %d: stored %v, fence %v; want nothing held", i, l.Stored(key(i)), l.Fence(key(i)))
		}
	}
	inUse1, rss1 := heapInUse(), testenv.RSS()
	t.Logf("swept after %d more acquires: %d records and tombstones, %d lock ids, %d watched keys held; heap in use %.1f MB → %.1f MB, RSS %.1f MB → %.1f MB",
		sweptAfter, entries, ids, l.Watched(), float64(inUse0)/1e6, float64(inUse1)/1e6, float64(rss0)/1e6, float64(rss1)/1e6)
	runtime.KeepAlive(l)
}

// heapInUse collects garbage and returns the heap in use. It collects
// twice: what pools hold survives one collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}
