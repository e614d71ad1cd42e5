package firestorelock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/sweepertest"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
)

// TestSweep checks that Sweep collects, in batches, exactly the documents
// whose expireAt has passed: leases expired for longer than the cleanup
// grace and tombstones the server clock has passed are deleted, a lease
// whose fence the clock has not passed is reduced to its tombstone, and
// live leases, recently expired ones and tombstones ahead of the clock
// stay. Fences go on growing after a sweep.
func TestSweep(t *testing.T) {
	t.Parallel()
	p := project(t)
	l := newLocker(t, p, firestorelock.WithSweepBatch(2))
	pr := newProbes(t, p, l)
	ctx := t.Context()
	const old = 5
	var olds []lock.Lease
	for i := range old {
		olds = append(olds, acquireOK(t, l, fmt.Sprintf("old/%d", i), margin))
	}
	passed := idemkit.Fence(time.Now().Add(-time.Minute).UnixMilli())
	ahead := idemkit.Fence(time.Now().Add(24 * time.Hour).UnixMilli())
	for key, f := range map[string]idemkit.Fence{"passed": passed, "ahead": ahead} {
		if err := pr.raiseFence(ctx, key, f); err != nil {
			t.Fatal(err)
		}
	}
	// A lease whose expireAt came due before the clock passed its fence,
	// as a lease created on a free key whose Create took longer than its
	// TTL and the grace to land would leave it.
	ref, norm, err := pr.doc("due-ahead")
	if err != nil {
		t.Fatal(err)
	}
	hourAgo := time.Now().Add(-time.Hour)
	if _, err := ref.Set(ctx, map[string]any{
		"key": norm, firestorelock.FieldLockID: lock.NewID(), firestorelock.FieldFence: int64(ahead),
		"acquiredAt": hourAgo, firestorelock.FieldExpiresAt: hourAgo, firestorelock.FieldExpireAt: hourAgo,
	}); err != nil {
		t.Fatal(err)
	}
	outlive(olds[old-1].ExpiresAt.Add(lock.CleanupGrace))
	recent := acquireOK(t, l, "recent", time.Millisecond) // expired, but not for long
	live := acquireOK(t, l, "live", time.Hour)

	// Every lease document carries expireAt = expiresAt + the grace.
	snap, err := pr.read(ctx, "live")
	if err != nil || snap == nil {
		t.Fatalf("read the live lock: %v", err)
	}
	if at, ok := snap.Data()[firestorelock.FieldExpireAt].(time.Time); !ok || !at.Equal(live.ExpiresAt.Add(lock.CleanupGrace)) {
		t.Fatalf("expireAt = %v; want %v", snap.Data()[firestorelock.FieldExpireAt], live.ExpiresAt.Add(lock.CleanupGrace))
	}

	if n, err := l.Sweep(ctx); err != nil || n != old+2 {
		t.Fatalf("Sweep = %d, %v; want %d (the old leases, the passed tombstone, the due lease)", n, err, old+2)
	}
	for _, c := range []struct {
		key    string
		stored bool
		fence  idemkit.Fence // 0: none
	}{
		{"old/0", false, 0}, {"old/4", false, 0}, {"passed", false, 0},
		{"recent", true, recent.Fence}, {"live", true, live.Fence},
		{"ahead", false, ahead}, {"due-ahead", false, ahead},
	} {
		stored, err := pr.stored(ctx, c.key)
		if err != nil || stored != c.stored {
			t.Fatalf("after Sweep, %q stored = %v, %v; want %v", c.key, stored, err, c.stored)
		}
		if f, err := pr.fence(ctx, c.key); err != nil || f != c.fence {
			t.Fatalf("after Sweep, %q carries fence %v, %v; want %v", c.key, f, err, c.fence)
		}
	}
	if lease := acquireOK(t, l, "old/0", time.Hour); lease.Fence <= olds[0].Fence {
		t.Fatalf("fence after a sweep: %v; want above %v", lease.Fence, olds[0].Fence)
	}
	if lease := acquireOK(t, l, "due-ahead", time.Hour); lease.Fence != ahead+1 {
		t.Fatalf("fence over the tombstone: %v; want %v", lease.Fence, ahead+1)
	}
	if _, ok, err := l.LookupID(ctx, live.ID); err != nil || !ok {
		t.Fatalf("the live lease was swept: %v, %v", ok, err)
	}
	if n, err := l.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("second Sweep = %d, %v; want 0", n, err)
	}
	outlive(recent.ExpiresAt.Add(lock.CleanupGrace))
	if n, err := l.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep after the grace = %d, %v; want 1 (recent)", n, err)
	}
	if lease := acquireOK(t, l, "recent", time.Hour); lease.Fence <= recent.Fence {
		t.Fatalf("fence after a sweep: %v; want above %v", lease.Fence, recent.Fence)
	}
}

// TestSweepRechecks checks that a lock acquired anew between a sweep's
// query and its transaction is not deleted: the transaction reads the
// documents again and judges them then.
func TestSweepRechecks(t *testing.T) {
	t.Parallel()
	p := project(t)
	l := newLocker(t, p)
	other := newLocker(t, p) // another node, with a client of its own
	ctx := t.Context()
	first := acquireOK(t, l, "k", margin)
	outlive(first.ExpiresAt.Add(lock.CleanupGrace))

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
	if taken.Fence <= first.Fence {
		t.Fatalf("the new lease has fence %v; want above %v", taken.Fence, first.Fence)
	}
	if _, ok, err := l.LookupID(ctx, taken.ID); err != nil || !ok {
		t.Fatalf("the new lease was swept: %v, %v", ok, err)
	}
}

// TestSweeper checks that the background sweeper collects an expired
// document on its own, logs its failures without the key, and stops.
func TestSweeper(t *testing.T) {
	t.Parallel()
	p := project(t)
	var logs sweepertest.Logs
	c := client(t, p)
	l, err := firestorelock.New(c, firestorelock.WithLogger(logs.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	pr := newProbes(t, p, l)
	const key = "sweeper-secret-key"
	lease := acquireOK(t, l, key, margin)
	outlive(lease.ExpiresAt.Add(lock.CleanupGrace))
	sweepertest.Run(t, sweepertest.Sweeper{
		Start:    l.StartSweeper,
		Interval: 500 * time.Millisecond,
		Collected: func(ctx context.Context) (bool, error) {
			snap, err := pr.read(ctx, key)
			return snap == nil, err
		},
		Break:   func() { _ = c.Close() },
		Logs:    &logs,
		Message: "firestorelock: sweeping expired locks failed",
		Secret:  key,
	})
}

// TestSweepPagesPastForeignDocuments puts more documents that the sweep
// cannot decode (not this package's) than a batch holds at the head of the
// expireAt order: the sweep pages past them and still deletes the expired
// locks behind them, and leaves the foreign documents alone.
func TestSweepPagesPastForeignDocuments(t *testing.T) {
	t.Parallel()
	p := project(t)
	l := newLocker(t, p, firestorelock.WithSweepBatch(2))
	pr := newProbes(t, p, l)
	ctx := t.Context()
	const foreign, expired = 5, 3
	for i := range foreign {
		doc := map[string]any{"other": int64(i), firestorelock.FieldExpireAt: time.Now().Add(-time.Hour)}
		if _, err := pr.locks.Doc(fmt.Sprint("foreign-", i)).Set(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	var last lock.Lease
	for i := range expired {
		last = acquireOK(t, l, fmt.Sprint("expired/", i), margin)
	}
	outlive(last.ExpiresAt.Add(lock.CleanupGrace))

	if n, err := l.Sweep(ctx); err != nil || n != expired {
		t.Fatalf("Sweep = %d, %v; want %d", n, err, expired)
	}
	if n := count(t, pr.locks); n != foreign {
		t.Fatalf("%d documents left; want the %d foreign ones", n, foreign)
	}
}
