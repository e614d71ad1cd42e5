package memlock_test

import (
	"context"
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
		RaiseFence: func(_ context.Context, key string, f lock.Fence) error {
			return l.RaiseFence(key, f)
		},
		Fence: func(_ context.Context, key string) (lock.Fence, error) {
			return l.Fence(key), nil
		},
		Stored: func(_ context.Context, key string) (bool, error) {
			return l.Stored(key), nil
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

func TestFenceRetentionKeepsFencesMonotone(t *testing.T) {
	ctx := t.Context()
	clock := fakeclock.New()
	l := memlock.New(memlock.WithClock(clock.Now), memlock.WithFenceRetention(time.Hour))
	var last lock.Fence
	for range 5 {
		lease, _, err := l.Acquire(ctx, "old", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		last = lease.Fence
		if _, err := l.Release(ctx, lease.ID); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(2 * time.Hour)
	// Enough acquires of other keys to trigger sweeps.
	for i := range 2000 {
		lease, _, err := l.Acquire(ctx, "other-"+string(rune(0x4e00+i)), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Release(ctx, lease.ID); err != nil {
			t.Fatal(err)
		}
	}
	if f := l.Fence("old"); f != 0 {
		t.Fatalf("the idle counter was kept (fence %v); retention should have let it go", f)
	}
	lease, _, err := l.Acquire(ctx, "old", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if lease.Fence <= last {
		t.Fatalf("fence %v after the counter was forgotten; want above %v", lease.Fence, last)
	}
}

func TestSweepDropsLongExpiredRecords(t *testing.T) {
	ctx := t.Context()
	clock := fakeclock.New()
	l := memlock.New(memlock.WithClock(clock.Now))
	for i := range 100 {
		if _, _, err := l.Acquire(ctx, "expiring-"+string(rune(0x4e00+i)), time.Second); err != nil {
			t.Fatal(err)
		}
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
		if l.Stored(k) {
			t.Fatalf("%s is still stored long after expiry", k)
		}
		if l.Fence(k) != 1 {
			t.Fatalf("the sweep dropped the fence counter of %s", k)
		}
	}
}

func TestRaiseFenceOnlyRaises(t *testing.T) {
	l := memlock.New()
	if err := l.RaiseFence("k", 10); err != nil {
		t.Fatal(err)
	}
	for _, f := range []lock.Fence{10, 3, 0} {
		if err := l.RaiseFence("k", f); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("RaiseFence(%v) = %v; want InvalidArgument", f, err)
		}
	}
	lease, _, err := l.Acquire(t.Context(), "k", time.Second)
	if err != nil || lease.Fence != 11 {
		t.Fatalf("fence %v, %v; want 11", lease.Fence, err)
	}
}
