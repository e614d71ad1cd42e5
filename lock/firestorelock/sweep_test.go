package firestorelock_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/internal/sweepertest"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
	"github.com/idemkit/idemkit/lock/firestorelock/firestoretest"
)

// fakeLocker builds a locker on a client of its own in project, on clock
// (the client clock is Firestore's time authority), with the skew warning
// off (the fake clock is far from the emulator's).
func fakeLocker(t testing.TB, project string, clock *fakeclock.Clock, opts ...firestorelock.Option) *firestorelock.Locker {
	t.Helper()
	return newLocker(t, project, append([]firestorelock.Option{firestorelock.WithClock(clock.Now), firestorelock.WithSkewTolerance(0)}, opts...)...)
}

// TestSweep checks that Sweep deletes, in batches, exactly the lock
// documents expired for longer than the cleanup grace, never a fence
// counter, and that fences go on growing after a sweep. It also checks the
// expireAt field that a TTL policy would use.
func TestSweep(t *testing.T) {
	t.Parallel()
	p := firestoretest.Project(t)
	clock := fakeclock.New()
	l := fakeLocker(t, p, clock, firestorelock.WithSweepBatch(2))
	pr := newProbes(t, p, l)
	ctx := t.Context()
	const old = 5
	for i := range old {
		acquireOK(t, l, fmt.Sprintf("old/%d", i), time.Second)
	}
	clock.Advance(time.Second + lock.CleanupGrace + time.Millisecond)
	acquireOK(t, l, "recent", time.Millisecond) // expired, but not for long
	live := acquireOK(t, l, "live", time.Hour)
	clock.Advance(time.Millisecond)

	// Every lock document carries expireAt = expiresAt + the grace.
	snap, err := pr.read(ctx, pr.locks.Doc(firestorelock.DocID("live")))
	if err != nil || snap == nil {
		t.Fatalf("read the live lock: %v", err)
	}
	if at, ok := snap.Data()[firestorelock.FieldExpireAt].(time.Time); !ok || !at.Equal(live.ExpiresAt.Add(lock.CleanupGrace)) {
		t.Fatalf("expireAt = %v; want %v", snap.Data()[firestorelock.FieldExpireAt], live.ExpiresAt.Add(lock.CleanupGrace))
	}

	n, err := l.Sweep(ctx)
	if err != nil || n != old {
		t.Fatalf("Sweep = %d, %v; want %d", n, err, old)
	}
	for _, c := range []struct {
		key    string
		stored bool
	}{{"old/0", false}, {"old/4", false}, {"recent", true}, {"live", true}} {
		if got, err := pr.stored(ctx, c.key); err != nil || got != c.stored {
			t.Fatalf("after Sweep, %q stored = %v, %v; want %v", c.key, got, err, c.stored)
		}
	}
	if got := count(t, pr.fences); got != old+2 {
		t.Fatalf("%d fence counters after Sweep; want %d (never deleted)", got, old+2)
	}
	if lease := acquireOK(t, l, "old/0", time.Hour); lease.Fence != 2 {
		t.Fatalf("fence after a sweep: %v; want 2", lease.Fence)
	}
	if _, ok, err := l.LookupID(ctx, live.ID); err != nil || !ok {
		t.Fatalf("the live lease was swept: %v, %v", ok, err)
	}
	if n, err := l.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("second Sweep = %d, %v; want 0", n, err)
	}
	clock.Advance(lock.CleanupGrace)
	if n, err := l.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep exactly at the grace = %d, %v; want 0 (deleted only when expired for more than the grace)", n, err)
	}
	clock.Advance(time.Millisecond)
	if n, err := l.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep after the grace = %d, %v; want 1 (recent)", n, err)
	}
	if lease := acquireOK(t, l, "recent", time.Hour); lease.Fence != 2 {
		t.Fatalf("fence after a sweep: %v; want 2", lease.Fence)
	}
}

// TestSweepRechecks checks that a lock acquired anew between a sweep's
// query and its transaction is not deleted: the transaction reads the
// documents again and judges them then.
func TestSweepRechecks(t *testing.T) {
	t.Parallel()
	p := firestoretest.Project(t)
	clock := fakeclock.New()
	l := fakeLocker(t, p, clock)
	other := fakeLocker(t, p, clock) // another node, with a client of its own
	pr := newProbes(t, p, l)
	ctx := t.Context()
	acquireOK(t, l, "k", time.Second)
	clock.Advance(time.Second + lock.CleanupGrace + time.Millisecond)

	var taken lock.Lease
	firestorelock.SetBeforeSweepTx(l, func() {
		if taken.ID == "" {
			taken = acquireOK(t, other, "k", time.Hour)
		}
	})
	n, err := l.Sweep(ctx)
	if err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v; want 0 (the lock came alive before the transaction)", n, err)
	}
	if taken.Fence != 2 {
		t.Fatalf("the new lease has fence %v; want 2", taken.Fence)
	}
	if _, ok, err := l.LookupID(ctx, taken.ID); err != nil || !ok {
		t.Fatalf("the new lease was swept: %v, %v", ok, err)
	}
	if f, err := pr.fence(ctx, "k"); err != nil || f != 2 {
		t.Fatalf("fence counter %v, %v; want 2", f, err)
	}
}

// TestSweeper checks that the background sweeper collects expired
// documents on its own and stops, and leaves the fence counter alone.
func TestSweeper(t *testing.T) {
	t.Parallel()
	p := firestoretest.Project(t)
	clock := fakeclock.New()
	l := fakeLocker(t, p, clock, firestorelock.WithLogger(slog.New(slog.DiscardHandler)))
	pr := newProbes(t, p, l)
	ctx := t.Context()
	acquireOK(t, l, "k", time.Second)
	clock.Advance(time.Second + lock.CleanupGrace + time.Millisecond)
	sweepertest.Run(t, sweepertest.Sweeper{
		Start:    l.StartSweeper,
		Interval: 500 * time.Millisecond,
		Collected: func(ctx context.Context) (bool, error) {
			stored, err := pr.stored(ctx, "k")
			return !stored, err
		},
	})
	if f, err := pr.fence(ctx, "k"); err != nil || f != 1 {
		t.Fatalf("fence counter %v, %v; want 1", f, err)
	}
}

// TestSweepPagesPastForeignDocuments puts more documents that the sweep
// cannot decode (not this package's) than a batch holds at the head of the
// expireAt order: the sweep pages past them and still deletes the expired
// locks behind them, and leaves the foreign documents alone.
func TestSweepPagesPastForeignDocuments(t *testing.T) {
	t.Parallel()
	p := firestoretest.Project(t)
	clock := fakeclock.New()
	l := fakeLocker(t, p, clock, firestorelock.WithSweepBatch(2))
	pr := newProbes(t, p, l)
	ctx := t.Context()
	const foreign, expired = 5, 3
	for i := range foreign {
		doc := map[string]any{"other": int64(i), firestorelock.FieldExpireAt: clock.Now().Add(-time.Hour)}
		if _, err := pr.locks.Doc(fmt.Sprint("foreign-", i)).Set(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	for i := range expired {
		acquireOK(t, l, fmt.Sprint("expired/", i), time.Second)
	}
	clock.Advance(time.Second + lock.CleanupGrace + time.Millisecond)

	if n, err := l.Sweep(ctx); err != nil || n != expired {
		t.Fatalf("Sweep = %d, %v; want %d", n, err, expired)
	}
	if n := count(t, pr.locks); n != foreign {
		t.Fatalf("%d documents left; want the %d foreign ones", n, foreign)
	}
}
