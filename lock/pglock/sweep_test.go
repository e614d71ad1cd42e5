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
	"github.com/idemkit/idemkit/lock/pglock/pgtest"
)

// TestSweep checks that Sweep deletes, in batches, exactly the lock rows
// expired for longer than the cleanup grace, and never a fence counter:
// fences go on growing after a sweep.
func TestSweep(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := pgtest.NewPool(t, srv.URL, 2)
	opts := tables(t, admin)
	l, err := New(pgtest.NewPool(t, srv.URL, 4), append(opts, WithSweepBatch(2))...)
	if err != nil {
		t.Fatal(err)
	}
	p := newProbes(t, admin, opts)
	ctx := t.Context()
	const old = 5
	for i := range old {
		k := fmt.Sprintf("old/%d", i)
		lease := acquireOK(t, l, k, time.Millisecond)
		if lease.Fence != 1 {
			t.Fatalf("fence %v", lease.Fence)
		}
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
		key    string
		stored bool
	}{{"old/0", false}, {"old/4", false}, {"recent", true}, {"live", true}, {"held-after-sweep", true}} {
		if got, err := p.stored(ctx, c.key); err != nil || got != c.stored {
			t.Fatalf("after Sweep, row of %q stored = %v, %v; want %v", c.key, got, err, c.stored)
		}
	}
	if got := p.rows(t, p.n.fences); got != old+3 {
		t.Fatalf("%d fence counters after Sweep; want %d (never deleted)", got, old+3)
	}
	if lease := acquireOK(t, l, "old/0", time.Hour); lease.Fence != 2 {
		t.Fatalf("fence after a sweep: %v; want 2", lease.Fence)
	}
	if info, ok, err := l.LookupID(ctx, held.ID); err != nil || !ok {
		t.Fatalf("a live lease was swept: %v, %v, %v", info, ok, err)
	}
	if n, err := l.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("second Sweep = %d, %v; want 0", n, err)
	}
}

// TestSweeper checks the background sweeper: it collects expired rows on
// its own, logs its failures without raw keys, and stops; it leaves the
// fence counter alone.
func TestSweeper(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := pgtest.NewPool(t, srv.URL, 2)
	opts := tables(t, admin)
	var logs sweepertest.Logs
	pool := pgtest.NewPool(t, srv.URL, 2)
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
			stored, err := p.stored(ctx, k)
			return !stored, err
		},
		Break:   pool.Close, // every sweep now fails
		Logs:    &logs,
		Message: "pglock: sweeping expired locks failed",
		Secret:  "secret-key",
	})
	if f, _ := p.fence(t.Context(), k); f != 1 {
		t.Fatalf("the sweeper touched the fence counter: %v", f)
	}
}

// TestSweepBuildingBlocks checks the edges of SweepBatches: a batch below 1
// is refused before any I/O (the client is a closed pool, so I/O would fail
// with ServiceUnavailable).
func TestSweepBuildingBlocks(t *testing.T) {
	t.Parallel()
	closed := pgtest.NewPool(t, testenv.Postgres(t).URL, 1)
	closed.Close()
	for _, batch := range []int{0, -1} {
		if n, err := SweepBatches(t.Context(), closed, "DELETE FROM x", batch); n != 0 || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("SweepBatches with batch %d = %d, %v; want InvalidArgument", batch, n, err)
		}
	}
	if n, err := SweepBatches(t.Context(), closed, "DELETE FROM x", 1); n != 0 || idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable {
		t.Fatalf("SweepBatches on a closed pool = %d, %v; want ServiceUnavailable", n, err)
	}
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
