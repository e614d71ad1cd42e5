package pglock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/sweepertest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
)

// TestSweep checks that Sweep deletes, in batches, exactly the rows
// expired for longer than the cleanup grace whose fence the server clock
// has passed, and that the next fence of a swept key is still greater.
func TestSweep(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opts := tables(t, admin)
	l, err := New(newPool(t, srv.URL, 4), append(opts, WithSweepBatch(2))...)
	if err != nil {
		t.Fatal(err)
	}
	p := newProbes(t, admin, opts)
	ctx := t.Context()
	const old = 5
	fences := make(map[string]idemkit.Fence)
	for i := range old {
		k := fmt.Sprintf("old/%d", i)
		fences[k] = acquireOK(t, l, k, time.Millisecond).Fence
	}
	// An expired lease and a tombstone whose fences are an hour ahead of
	// the clock: they must outlive the sweep.
	ahead := idemkit.Fence(time.Now().Add(time.Hour).UnixMilli())
	if err := p.raiseFence(ctx, "ahead/lease", ahead); err != nil {
		t.Fatal(err)
	}
	if lease := acquireOK(t, l, "ahead/lease", time.Millisecond); lease.Fence != ahead+1 {
		t.Fatalf("fence after a raised one: %v; want %v", lease.Fence, ahead+1)
	}
	if err := p.raiseFence(ctx, "ahead/tombstone", ahead); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lock.CleanupGrace + 2*margin)
	acquireOK(t, l, "recent", time.Millisecond) // expired, but not for long
	acquireOK(t, l, "live", time.Hour)
	held := acquireOK(t, l, "held-after-sweep", time.Hour)
	time.Sleep(margin)

	n, err := l.Sweep(ctx)
	if err != nil || n != old {
		t.Fatalf("Sweep = %d, %v; want %d", n, err, old)
	}
	for _, c := range []struct {
		key   string
		fence bool // the row is still there
	}{
		{"old/0", false}, {"old/4", false}, {"recent", true}, {"live", true}, {"held-after-sweep", true},
		{"ahead/lease", true}, {"ahead/tombstone", true},
	} {
		if f, err := p.fence(ctx, c.key); err != nil || (f != 0) != c.fence {
			t.Fatalf("after Sweep, the row of %q has fence %v (%v); want it kept: %v", c.key, f, err, c.fence)
		}
	}
	if got := p.rows(t); got != 5 {
		t.Fatalf("%d rows after Sweep; want 5", got)
	}
	if lease := acquireOK(t, l, "old/0", time.Hour); lease.Fence <= fences["old/0"] {
		t.Fatalf("fence after a sweep: %v; want more than %v", lease.Fence, fences["old/0"])
	}
	if lease := acquireOK(t, l, "ahead/tombstone", time.Hour); lease.Fence != ahead+1 {
		t.Fatalf("fence after a tombstone: %v; want %v", lease.Fence, ahead+1)
	}
	if info, ok, err := l.LookupID(ctx, held.ID); err != nil || !ok {
		t.Fatalf("a live lease was swept: %v, %v, %v", info, ok, err)
	}
	if n, err := l.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("second Sweep = %d, %v; want 0", n, err)
	}
}

// TestSweeper checks the background sweeper: it collects an expired row
// on its own, logs its failures without raw keys, and stops.
func TestSweeper(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opts := tables(t, admin)
	var logs sweepertest.Logs
	pool := newPool(t, srv.URL, 2)
	l, err := New(pool, append(opts, WithLogger(logs.Logger()))...)
	if err != nil {
		t.Fatal(err)
	}
	p := newProbes(t, admin, opts)
	const k = "sweeper/secret-key"
	acquireOK(t, l, k, time.Millisecond)
	sweepertest.Run(t, sweepertest.Sweeper{
		Start: l.StartSweeper,
		Collected: func(ctx context.Context) (bool, error) {
			f, err := p.fence(ctx, k) // 0 once the row is gone
			return f == 0, err
		},
		Break:   pool.Close, // every sweep now fails
		Logs:    &logs,
		Message: "pglock: sweeping expired locks failed",
		Secret:  "secret-key",
	})
}

// acquireOK acquires key on l and fails the test unless it gets it.
func acquireOK(t *testing.T, l *Locker, key string, ttl time.Duration) lock.Lease {
	t.Helper()
	lease, ok, err := l.Acquire(t.Context(), key, ttl)
	if err != nil || !ok {
		t.Fatalf("Acquire(%q): %v, %v", key, ok, err)
	}
	return lease
}
