package pglock

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/lock/provider"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
)

// TestFencesFromTheClock checks the fence rule on the rows themselves: a
// key's first fence is the server clock in Unix milliseconds at the grant
// (its AcquiredAt); a fence ahead of the clock grows by one; a release
// before the clock has passed the fence leaves a tombstone (fence only: not
// live, not found by id, acquirable), after it deletes the row; either way
// the next fence is greater.
func TestFencesFromTheClock(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opts := tables(t, admin)
	l, err := New(newPool(t, srv.URL, 4), opts...)
	if err != nil {
		t.Fatal(err)
	}
	p := newProbes(t, admin, opts)
	ctx := t.Context()

	t.Run("first fence is the clock", func(t *testing.T) {
		lease := acquireOK(t, l, "clock/first", time.Minute)
		if want := idemkit.Fence(lease.AcquiredAt.UnixMilli()); lease.Fence != want {
			t.Fatalf("first fence %v; want the grant's Unix milliseconds %v", lease.Fence, want)
		}
		if len(lease.Fence.String()) != idemkit.FenceDigits || lease.Fence >= idemkit.FenceWarn {
			t.Fatalf("fence %v is not a 15-digit fence below the warning limit", lease.Fence)
		}
		time.Sleep(5 * time.Millisecond) // the clock passes the fence
		if out, err := l.ReleaseKey(ctx, lease.Key, lease.ID); err != nil || !out.OK {
			t.Fatalf("ReleaseKey: %+v, %v", out, err)
		}
		if f, err := p.fence(ctx, lease.Key); err != nil || f != 0 {
			t.Fatalf("a release after the clock passed the fence left a row with fence %v (%v); want it deleted", f, err)
		}
		next := acquireOK(t, l, "clock/first", time.Minute)
		if next.Fence <= lease.Fence || next.Fence != idemkit.Fence(next.AcquiredAt.UnixMilli()) {
			t.Fatalf("fence after a release: %v (granted at %v); want the clock, above %v", next.Fence, next.AcquiredAt.UnixMilli(), lease.Fence)
		}
	})

	t.Run("a release before the clock passes the fence leaves a tombstone", func(t *testing.T) {
		const k = "clock/ahead"
		ahead := idemkit.Fence(time.Now().Add(time.Hour).UnixMilli())
		if err := p.raiseFence(ctx, k, ahead); err != nil {
			t.Fatal(err)
		}
		lease := acquireOK(t, l, k, time.Minute)
		if lease.Fence != ahead+1 {
			t.Fatalf("fence %v; want %v", lease.Fence, ahead+1)
		}
		if out, err := l.Release(ctx, lease.ID); err != nil || !out.OK {
			t.Fatalf("Release: %+v, %v", out, err)
		}
		if tomb, err := p.tombstone(ctx, k); err != nil || !tomb {
			t.Fatalf("no tombstone after the release: %v, %v", tomb, err)
		}
		if f, _ := p.fence(ctx, k); f != lease.Fence {
			t.Fatalf("the tombstone holds fence %v; want %v", f, lease.Fence)
		}
		var keepUntil time.Time
		if err := admin.QueryRow(ctx, "SELECT expires_at FROM "+p.table.sanitize()+" WHERE key = 'k:' || $1::text", k).Scan(&keepUntil); err != nil {
			t.Fatal(err)
		}
		if want := provider.KeepUntil(lease.Fence, time.Time{}); !keepUntil.Equal(want) {
			t.Fatalf("the tombstone expires at %v; want %v", keepUntil, want)
		}
		// Not live, not found by id or key; a second release or an
		// extend finds nothing.
		if locked, err := l.IsLocked(ctx, k); err != nil || locked {
			t.Fatalf("IsLocked on a tombstone: %v, %v", locked, err)
		}
		if _, ok, err := l.LookupKey(ctx, k); err != nil || ok {
			t.Fatalf("LookupKey on a tombstone: %v, %v", ok, err)
		}
		if out, err := l.Release(ctx, lease.ID); err != nil || out.OK || out.Reason != lock.ReasonNotFound {
			t.Fatalf("second Release: %+v, %v; want not found", out, err)
		}
		if out, err := l.ExtendKey(ctx, k, lease.ID, time.Minute); err != nil || out.OK || out.Reason != lock.ReasonNotFound {
			t.Fatalf("Extend after the release: %+v, %v; want not found", out, err)
		}
		next := acquireOK(t, l, k, time.Minute)
		if next.Fence != lease.Fence+1 {
			t.Fatalf("fence over a tombstone: %v; want %v", next.Fence, lease.Fence+1)
		}
	})

	t.Run("contention consumes no fence", func(t *testing.T) {
		const k = "clock/contended"
		lease := acquireOK(t, l, k, time.Minute)
		for range 3 {
			if _, ok, err := l.Acquire(ctx, k, time.Minute); err != nil || ok {
				t.Fatalf("Acquire of a held key: %v, %v", ok, err)
			}
		}
		if f, err := p.fence(ctx, k); err != nil || f != lease.Fence {
			t.Fatalf("fence after contention: %v, %v; want %v", f, err, lease.Fence)
		}
	})

	t.Run("fence overflow writes nothing", func(t *testing.T) {
		const k = "clock/full"
		if err := p.raiseFence(ctx, k, idemkit.FenceMax); err != nil {
			t.Fatal(err)
		}
		_, _, err := l.Acquire(ctx, k, time.Minute)
		if idemkit.CodeOf(err) != idemkit.CodeInternal {
			t.Fatalf("Acquire past the maximum fence: %v; want Internal", err)
		}
		if tomb, _ := p.tombstone(ctx, k); !tomb {
			t.Fatal("the refused acquire changed the row")
		}
	})
}

// TestRefusedAcquireIsReadOnly checks on a server of its own (nothing else
// writes to it) that an acquire refused because the key is held writes no
// WAL: the WAL insert position does not move across a series of them,
// while a granted acquire moves it. Background work of the server (a
// checkpoint, a running-transactions record) may move it at any time, so a
// series is tried again a few times before the test fails.
func TestRefusedAcquireIsReadOnly(t *testing.T) {
	t.Parallel()
	srv := testenv.NewPostgres(t)
	admin := newPool(t, srv.URL, 1)
	opts := tables(t, admin)
	l, err := New(newPool(t, srv.URL, 1), opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	lsn := func() string {
		t.Helper()
		var s string
		if err := admin.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	refuse := func() {
		t.Helper()
		if _, ok, err := l.Acquire(ctx, "held", time.Hour); err != nil || ok {
			t.Fatalf("Acquire of a held key: %v, %v; want locked", ok, err)
		}
	}
	acquireOK(t, l, "held", time.Hour)
	refuse() // a first read may set hint bits or prune the page
	quiet := false
	var moves []string
	for range 5 {
		before := lsn()
		for range 20 {
			refuse()
		}
		after := lsn()
		if before == after {
			quiet = true
			break
		}
		moves = append(moves, before+" -> "+after)
	}
	if !quiet {
		t.Fatalf("the WAL moved across every series of refused acquires: %v", moves)
	}
	before := lsn()
	acquireOK(t, l, "free", time.Hour)
	if lsn() == before {
		t.Fatal("a granted acquire did not move the WAL: the measurement sees nothing")
	}
}

// TestStalledServer freezes the server (SIGSTOP) and checks that every
// operation fails with a coded timeout or unavailability within its ctx's
// deadline (plus a generous bound), never hangs, on established
// connections and on new ones alike, and that the locker works again once
// the server resumes.
func TestStalledServer(t *testing.T) {
	t.Parallel()
	srv := testenv.NewPostgres(t)
	admin := newPool(t, srv.URL, 2)
	opts := tables(t, admin)
	pool := newPool(t, srv.URL, 4)
	l, err := New(pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	lease := acquireOK(t, l, "stall/held", time.Hour)
	fresh, err := New(newPool(t, srv.URL, 2), opts...) // no connection yet
	if err != nil {
		t.Fatal(err)
	}
	resume := stall(t, srv, admin)
	defer resume()

	const deadline = 300 * time.Millisecond
	const bound = deadline + 2*time.Second
	ops := []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"Acquire", func(ctx context.Context) error { _, _, err := l.Acquire(ctx, "stall/free", time.Minute); return err }},
		{"Release", func(ctx context.Context) error { _, err := l.Release(ctx, lease.ID); return err }},
		{"ReleaseKey", func(ctx context.Context) error { _, err := l.ReleaseKey(ctx, lease.Key, lease.ID); return err }},
		{"Extend", func(ctx context.Context) error { _, err := l.Extend(ctx, lease.ID, time.Hour); return err }},
		{"ExtendKey", func(ctx context.Context) error {
			_, err := l.ExtendKey(ctx, lease.Key, lease.ID, time.Hour)
			return err
		}},
		{"IsLocked", func(ctx context.Context) error { _, err := l.IsLocked(ctx, lease.Key); return err }},
		{"LookupKey", func(ctx context.Context) error { _, _, err := l.LookupKey(ctx, lease.Key); return err }},
		{"LookupID", func(ctx context.Context) error { _, _, err := l.LookupID(ctx, lease.ID); return err }},
		{"Sweep", func(ctx context.Context) error { _, err := l.Sweep(ctx); return err }},
		{"SetupSchema", func(ctx context.Context) error { return SetupSchema(ctx, pool, opts...) }},
		{"Acquire on a new connection", func(ctx context.Context) error {
			_, _, err := fresh.Acquire(ctx, "stall/free", time.Minute)
			return err
		}},
	}
	for _, op := range ops {
		ctx, cancel := context.WithTimeout(t.Context(), deadline)
		start := time.Now()
		err := op.run(ctx)
		took := time.Since(start)
		cancel()
		if code := idemkit.CodeOf(err); code != idemkit.CodeNetworkTimeout && code != idemkit.CodeServiceUnavailable {
			t.Errorf("%s on a stalled server: %v; want NetworkTimeout or ServiceUnavailable", op.name, err)
		}
		if took > bound {
			t.Errorf("%s on a stalled server took %v; want at most %v", op.name, took, bound)
		}
	}

	resume()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if info, ok, err := l.LookupID(ctx, lease.ID); err != nil || !ok || info.Fence != lease.Fence {
		t.Fatalf("LookupID after the server resumed: %v, %v, %v", info, ok, err)
	}
}
