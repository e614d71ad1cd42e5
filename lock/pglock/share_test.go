package pglock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
)

type acquired struct {
	ok  bool
	err error
}

// attemptsPending returns how many acquires of key wait in l for the next
// shared statement.
func attemptsPending(l *Locker, key string) int {
	sk, _ := storageKey(key)
	l.shared.mu.Lock()
	defer l.shared.mu.Unlock()
	if ka := l.shared.keys[sk]; ka != nil && ka.pending != nil {
		return ka.pending.members
	}
	return 0
}

// TestAcquireSharesStatement: the acquires of one key that run at once in
// a process share one statement. With the first held back, 31 more
// acquires of the free key cost one statement between them: exactly one of
// the 32 gets the lease, the others answer "locked".
func TestAcquireSharesStatement(t *testing.T) {
	t.Parallel()
	const calls = 32
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opts := tables(t, admin)
	db := &gatedPool{Pool: newPool(t, srv.URL, 8), gate: make(chan struct{})}
	l, err := New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	db.sql = l.q.acquire
	ctx := t.Context()
	results := make(chan acquired, calls)
	acquire := func() {
		_, ok, err := l.Acquire(ctx, "k", time.Minute)
		results <- acquired{ok, err}
	}
	go acquire()
	await(t, "the first statement", func() bool { return db.reads.Load() == 1 })
	for range calls - 1 {
		go acquire()
	}
	await(t, "the others join the next statement", func() bool { return attemptsPending(l, "k") == calls-1 })
	close(db.gate)
	won := 0
	for range calls {
		r := receive(t, "an acquire", results)
		if r.err != nil {
			t.Fatalf("Acquire: %v", r.err)
		}
		if r.ok {
			won++
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d acquires got the lease; want 1", won, calls)
	}
	if n := db.reads.Load(); n != 2 {
		t.Fatalf("%d acquires ran %d statements; want 2", calls, n)
	}
}

// TestAcquireSharedStatementFails: an acquire whose shared statement,
// sent by another acquire, failed runs its own: it never gets another
// call's failure. With the first statement held back, two acquires join
// the next, which fails; the one that sent it reports the failure, the
// other runs its own statement and answers "locked".
func TestAcquireSharedStatementFails(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opts := tables(t, admin)
	db := &gatedPool{Pool: newPool(t, srv.URL, 8), gate: make(chan struct{}), fail: 2}
	l, err := New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := New(admin, opts...)
	if err != nil {
		t.Fatal(err)
	}
	acquireOK(t, holder, "k", time.Minute)
	db.sql = l.q.acquire
	ctx := t.Context()
	results := make(chan acquired, 3)
	acquire := func() {
		_, ok, err := l.Acquire(ctx, "k", time.Minute)
		results <- acquired{ok, err}
	}
	go acquire()
	await(t, "the first statement", func() bool { return db.reads.Load() == 1 })
	go acquire()
	go acquire()
	await(t, "two acquires join the next statement", func() bool { return attemptsPending(l, "k") == 2 })
	close(db.gate)
	failed := 0
	for range 3 {
		r := receive(t, "an acquire", results)
		switch {
		case r.err != nil && idemkit.CodeOf(r.err) == idemkit.CodeAuthFailed:
			failed++
		case r.err != nil || r.ok:
			t.Fatalf("Acquire = %v, %v; want locked, or the failed statement's AuthFailed", r.ok, r.err)
		}
	}
	if failed != 1 {
		t.Fatalf("%d acquires reported the failed statement; want only the one that sent it", failed)
	}
	if n := db.reads.Load(); n != 3 {
		t.Fatalf("%d statements; want 3 (the first, the failed shared one, and the other member's own)", n)
	}
}

// TestReleaseWakesLocalWatches: a release through the locker wakes the
// key's watches in the process as soon as it returns, without waiting for
// its notification. The locker's listener is refused here, so only the
// release itself can wake the watch.
func TestReleaseWakesLocalWatches(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	l, err := New(newPool(t, srv.URL, 4), tables(t, admin)...)
	if err != nil {
		t.Fatal(err)
	}
	l.notes.connect = func(context.Context) (*pgx.Conn, error) {
		return nil, errors.New("test: the listener is refused")
	}
	ctx := t.Context()
	for _, byKey := range []bool{true, false} {
		lease := acquireOK(t, l, "k", time.Minute)
		ch, stop := l.Watch(ctx, "k")
		select {
		case <-ch:
			t.Fatal("the watch of a held key fired before the release")
		default:
		}
		if byKey {
			_, err = l.ReleaseKey(ctx, lease.Key, lease.ID)
		} else {
			_, err = l.Release(ctx, lease.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		default:
			t.Fatalf("the watch had not fired when the release (by key: %v) returned", byKey)
		}
		if l.notes.isUp() {
			t.Fatal("the refused listener is up")
		}
		stop()
	}
}
