package memlock_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/locktest"
	"github.com/idemkit/idemkit/lock/memlock"
)

func env(l *memlock.Locker) *locktest.Env {
	return &locktest.Env{
		Locker: l,
		RaiseFence: func(_ context.Context, key string, f idemkit.Fence) error {
			return l.RaiseFence(key, f)
		},
		Fence: func(_ context.Context, key string) (idemkit.Fence, error) {
			return l.Fence(key), nil
		},
		Stored: func(_ context.Context, key string) (bool, error) {
			return l.Stored(key), nil
		},
		Keys: func(context.Context) ([]string, error) {
			return l.Unexpiring(), nil
		},
		Break: func() { _ = l.Close() },
	}
}

// TestConformance runs the suite with an injected clock, so expiry
// boundaries are stepped exactly.
func TestConformance(t *testing.T) {
	locktest.Run(t, func(t *testing.T, cfg locktest.Config) *locktest.Env {
		clock := fakeclock.New()
		l := memlock.New(memlock.WithClock(clock.Now), memlock.WithCleanupInIsLocked(cfg.CleanupInIsLocked), memlock.WithLogger(cfg.Logger))
		e := env(l)
		e.Advance = clock.Advance
		return e
	})
}

// TestConformanceRealClock runs the suite again on the process clock, as
// the network backends run it: with sleeps and margins.
func TestConformanceRealClock(t *testing.T) {
	if testing.Short() {
		t.Skip("the real-clock run sleeps through expiries; -short runs only the fake-clock suite")
	}
	locktest.Run(t, func(t *testing.T, cfg locktest.Config) *locktest.Env {
		l := memlock.New(memlock.WithCleanupInIsLocked(cfg.CleanupInIsLocked), memlock.WithLogger(cfg.Logger))
		e := env(l)
		e.Margin = 30 * time.Millisecond
		return e
	})
}

func TestWatchFiresOnReleaseAndClose(t *testing.T) {
	ctx := t.Context()
	l := memlock.New()
	lease, _, err := l.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ch, stop := l.Watch(ctx, "k")
	defer stop()
	select {
	case <-ch:
		t.Fatal("watch fired while the lock is held")
	default:
	}
	if _, err := l.Release(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	fired(t, ch, "release")

	free, stopFree := l.Watch(ctx, "free")
	defer stopFree()
	fired(t, free, "free key")

	if _, _, err := l.Acquire(ctx, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	ch2, stop2 := l.Watch(ctx, "k")
	stop2()
	stop2() // idempotent
	ch3, stop3 := l.Watch(ctx, "k")
	defer stop3()
	_ = l.Close()
	fired(t, ch3, "close")
	select {
	case <-ch2:
		t.Fatal("a stopped watch fired")
	default:
	}
}

// fired fails the test unless ch is closed within a generous bound (a
// guard against hanging, not a timing assertion).
func fired(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("the watch did not fire on %s", what)
	}
}

// TestBoundedByWhatIsLive: with ever-new keys (one per request, as an
// idempotency guard makes them), released or left to expire, the locker
// holds little more than the live locks: expired records and tombstones
// are swept as it works.
func TestBoundedByWhatIsLive(t *testing.T) {
	ctx := t.Context()
	clock := fakeclock.New()
	l := memlock.New(memlock.WithClock(clock.Now))
	const live = 50
	for i := range 20_000 {
		k := "req-" + strconv.Itoa(i)
		lease, ok, err := l.Acquire(ctx, k, time.Second)
		if err != nil || !ok {
			t.Fatalf("acquire %d: %v, %v", i, ok, err)
		}
		if i%2 == 0 {
			// Released in the millisecond it was granted: a tombstone
			// until the clock passes its fence.
			if out, err := l.Release(ctx, lease.ID); err != nil || !out.OK {
				t.Fatalf("release %d: %+v, %v", i, out, err)
			}
		}
		if i%live == 0 {
			clock.Advance(100 * time.Millisecond)
		}
	}
	// Live: the last second's worth of unreleased locks (10 batches of 25).
	// Expired ones linger for at most the cleanup grace and one sweep.
	entries, ids := l.Size()
	if bound := 4 * (int((time.Second+lock.CleanupGrace)/(100*time.Millisecond)) + 1) * live; entries > bound || ids > entries {
		t.Fatalf("%d entries and %d ids held after 20000 keys; want at most %d", entries, ids, bound)
	}
	// Once everything has expired, a sweep leaves nothing behind.
	clock.Advance(time.Second + lock.CleanupGrace + time.Millisecond)
	for i := range 2 * max(entries, 256) {
		lease, _, err := l.Acquire(ctx, "after-"+strconv.Itoa(i), time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = l.Release(ctx, lease.ID)
		clock.Advance(time.Millisecond)
	}
	if entries, _ := l.Size(); entries > 300 {
		t.Fatalf("%d entries held after everything expired; want only the latest few", entries)
	}
}

// TestTombstonesKeepFencesAheadOfTheClock: a release before the clock has
// passed the fence leaves a tombstone, which is invisible and acquirable,
// carries the fence, and goes once the clock passes it.
func TestTombstonesKeepFencesAheadOfTheClock(t *testing.T) {
	ctx := t.Context()
	clock := fakeclock.New()
	l := memlock.New(memlock.WithClock(clock.Now))
	first, _, err := l.Acquire(ctx, "k", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if want := idemkit.Fence(clock.Now().UnixMilli()); first.Fence != want {
		t.Fatalf("first fence %v; want the clock in ms, %v", first.Fence, want)
	}
	if _, err := l.Release(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if l.Stored("k") || l.Fence("k") != first.Fence {
		t.Fatalf("after a release within the fence's millisecond: stored %v, fence %v; want a tombstone with %v", l.Stored("k"), l.Fence("k"), first.Fence)
	}
	second, _, err := l.Acquire(ctx, "k", time.Hour)
	if err != nil || second.Fence != first.Fence+1 {
		t.Fatalf("fence over a tombstone: %v, %v; want %v", second.Fence, err, first.Fence+1)
	}
	clock.Advance(time.Millisecond)
	if _, err := l.Release(ctx, second.ID); err != nil {
		t.Fatal(err)
	}
	// The clock is at first+1 ms = second's fence: not yet passed.
	if l.Fence("k") != second.Fence {
		t.Fatalf("fence %v; want the tombstone's %v", l.Fence("k"), second.Fence)
	}
	clock.Advance(time.Millisecond)
	third, _, err := l.Acquire(ctx, "k", time.Hour)
	if err != nil || third.Fence <= second.Fence {
		t.Fatalf("fence %v, %v; want above %v", third.Fence, err, second.Fence)
	}
	clock.Advance(time.Millisecond)
	if _, err := l.Release(ctx, third.ID); err != nil {
		t.Fatal(err)
	}
	if l.Fence("k") != 0 {
		t.Fatalf("a release after the clock passed the fence left fence %v; want the record gone", l.Fence("k"))
	}
}

func TestSweepDropsLongExpiredRecords(t *testing.T) {
	ctx := t.Context()
	clock := fakeclock.New()
	l := memlock.New(memlock.WithClock(clock.Now))
	var fences []idemkit.Fence
	for i := range 100 {
		lease, _, err := l.Acquire(ctx, "expiring-"+string(rune(0x4e00+i)), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		fences = append(fences, lease.Fence)
	}
	clock.Advance(time.Second + lock.CleanupGrace + time.Millisecond)
	for i := range 300 {
		lease, _, err := l.Acquire(ctx, "fresh-"+string(rune(0x4e00+i)), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Release(ctx, lease.ID); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100 {
		k := "expiring-" + string(rune(0x4e00+i))
		if l.Stored(k) || l.Fence(k) != 0 {
			t.Fatalf("%s is still held long after expiry and past its fence", k)
		}
		if lease, _, err := l.Acquire(ctx, k, time.Second); err != nil || lease.Fence <= fences[i] {
			t.Fatalf("%s: fence %v, %v after the sweep; want above %v", k, lease.Fence, err, fences[i])
		}
	}
}

func TestRaiseFenceOnlyRaisesFreeKeys(t *testing.T) {
	ctx := t.Context()
	l := memlock.New()
	if err := l.RaiseFence("k", 2*idemkit.FenceWarn); err != nil {
		t.Fatal(err)
	}
	for _, f := range []idemkit.Fence{2 * idemkit.FenceWarn, 3} {
		if err := l.RaiseFence("k", f); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("RaiseFence(%v) = %v; want InvalidArgument", f, err)
		}
	}
	lease, _, err := l.Acquire(ctx, "k", time.Second)
	if err != nil || lease.Fence != 2*idemkit.FenceWarn+1 {
		t.Fatalf("fence %v, %v; want %v", lease.Fence, err, 2*idemkit.FenceWarn+1)
	}
	if err := l.RaiseFence("k", idemkit.FenceMax); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("RaiseFence on a held key = %v; want InvalidArgument", err)
	}
}

// TestFencesSurviveAClockSteppingBack: a wall clock that steps back (an NTP
// correction) after records were deleted still gets fences above them.
func TestFencesSurviveAClockSteppingBack(t *testing.T) {
	ctx := t.Context()
	var mu sync.Mutex
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	set := func(t time.Time) { mu.Lock(); now = t; mu.Unlock() }
	l := memlock.New(memlock.WithClock(clock))
	first, _, err := l.Acquire(ctx, "k", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	start := clock()
	set(start.Add(time.Second))
	if out, err := l.Release(ctx, first.ID); err != nil || !out.OK {
		t.Fatalf("release: %+v, %v", out, err)
	}
	if l.Fence("k") != 0 {
		t.Fatal("the record was kept although the clock passed its fence")
	}
	set(start.Add(-time.Hour))
	second, _, err := l.Acquire(ctx, "k", time.Second)
	if err != nil || second.Fence <= first.Fence {
		t.Fatalf("fence after the clock stepped back: %v, %v; want above %v", second.Fence, err, first.Fence)
	}
}
