package firestorestore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/sweepertest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// expired is long enough for a record with a 1 ms lifetime to be past its
// expireAt (its lifetime and a second of slack) by Firestore's clock.
const expired = 1500 * time.Millisecond

// TestSweep checks that Sweep deletes, in batches, exactly the documents
// that may go by Firestore's clock: expired outcomes and tombstones of
// released claims (of a store trusting the clock never to step back), not
// live records, not a claim whose lease ran out less than
// store.ClaimRetention ago, not a record written again since it expired,
// and not the tombstone of a store with the default largest clock step (a
// minute past its fence); a sweeper with that step keeps even a tombstone
// whose expireAt passed until then. Every document carries an expireAt.
func TestSweep(t *testing.T) {
	t.Parallel()
	c := client(t, testenv.FirestoreProject(t))
	s := newStore(t, c, firestorestore.WithSweepBatch(2), firestorestore.WithMaxClockStep(0))
	ctx := t.Context()
	stepped := newStore(t, c)
	kept, _, err := stepped.Claim(ctx, "kept", "fp", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := stepped.Release(ctx, "kept", kept.Fence); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	put := func(k string, fence int, ttl time.Duration) {
		t.Helper()
		rec := store.Record{Key: k, State: store.StateCompleted, Response: []byte(k), Fence: idemkit.Fence(fence)}
		if ok, err := s.Put(ctx, rec, ttl); err != nil || !ok {
			t.Fatalf("Put: %v, %v", ok, err)
		}
	}
	const old, released = 3, 2
	for i := range old {
		put(fmt.Sprint("old/", i), 1, time.Millisecond)
	}
	for i := range released {
		k := fmt.Sprint("released/", i)
		rec, claimed, err := s.Claim(ctx, k, "fp", time.Hour)
		if err != nil || !claimed {
			t.Fatalf("Claim: %v, %v", claimed, err)
		}
		if ok, err := s.Release(ctx, k, rec.Fence); err != nil || !ok {
			t.Fatalf("Release: %v, %v", ok, err)
		}
	}
	if _, claimed, err := s.Claim(ctx, "run-out", "fp", time.Millisecond); err != nil || !claimed {
		t.Fatalf("Claim: %v, %v", claimed, err)
	}
	put("renewed", 1, time.Millisecond)
	put("live", 1, time.Hour)
	if ids, err := unexpiring(ctx, c, firestorestore.DefaultCollection); err != nil || len(ids) > 0 {
		t.Fatalf("documents without expireAt: %q, %v", ids, err)
	}
	time.Sleep(expired)
	put("renewed", 2, time.Hour)
	// A sweeper allowing for a minute's clock step keeps the tombstones
	// whose expireAt (written with no step) has passed: their fences are
	// recent.
	if n, err := stepped.Sweep(ctx); err != nil || n != old {
		t.Fatalf("Sweep with the default clock step = %d, %v; want %d (the old outcomes only)", n, err, old)
	}
	if n, err := s.Sweep(ctx); err != nil || n != released {
		t.Fatalf("Sweep = %d, %v; want %d", n, err, released)
	}
	left := map[string]bool{}
	for _, d := range docs(t, c, firestorestore.DefaultCollection) {
		left[d.Ref.ID] = true
	}
	if len(left) != 4 || !left["live"] || !left["renewed"] || !left["run-out"] || !left["kept"] {
		t.Fatalf("documents left: %v; want live, renewed, run-out and kept", left)
	}
	if n, err := s.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("second Sweep = %d, %v; want 0", n, err)
	}
}

// TestSweepSparesRewrittenRecords writes an expired record again between
// the sweep's query and its deletes: the delete is conditioned on the
// update time the query read, so the record written again survives.
func TestSweepSparesRewrittenRecords(t *testing.T) {
	t.Parallel()
	p := testenv.FirestoreProject(t)
	other := newStore(t, client(t, p))
	var rewrite atomic.Bool
	ctx := t.Context()
	c := client(t, p, intercept(func(method string, _ any, call func() error) error {
		if method == "/google.firestore.v1.Firestore/BatchWrite" && rewrite.CompareAndSwap(true, false) {
			rec := store.Record{Key: "again", State: store.StateCompleted, Fence: 2}
			if ok, err := other.Put(ctx, rec, time.Hour); err != nil || !ok {
				return fmt.Errorf("the rewrite failed: %v, %v", ok, err)
			}
		}
		return call()
	})...)
	s := newStore(t, c)
	for _, k := range []string{"gone", "again"} {
		if ok, err := s.Put(ctx, store.Record{Key: k, State: store.StateCompleted, Fence: 1}, time.Millisecond); err != nil || !ok {
			t.Fatalf("Put: %v, %v", ok, err)
		}
	}
	time.Sleep(expired)
	rewrite.Store(true)
	if n, err := s.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1", n, err)
	}
	if rewrite.Load() {
		t.Fatal("the sweep sent no BatchWrite")
	}
	if got, ok, err := s.Get(ctx, "again"); err != nil || !ok || got.Fence != 2 {
		t.Fatalf("Get = %+v, %v, %v; want the record written again", got, ok, err)
	}
	if _, ok, err := s.Get(ctx, "gone"); err != nil || ok {
		t.Fatalf("Get = %v, %v; want nothing", ok, err)
	}
}

// TestSweepPagesPastForeignDocuments puts more documents that the sweep
// leaves alone (not this store's: an expireAt in the past and nothing
// else) than a batch holds at the head of the expireAt order: the sweep
// pages past them and still deletes the expired records behind them.
func TestSweepPagesPastForeignDocuments(t *testing.T) {
	t.Parallel()
	c := client(t, testenv.FirestoreProject(t))
	s := newStore(t, c, firestorestore.WithSweepBatch(2))
	ctx := t.Context()
	const foreign, old = 5, 3
	for i := range foreign {
		doc := map[string]any{"other": int64(i), firestorestore.FieldExpireAt: time.Unix(0, 0)}
		if _, err := c.Collection(firestorestore.DefaultCollection).Doc(fmt.Sprint("foreign-", i)).Set(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	for i := range old {
		rec := store.Record{Key: fmt.Sprint("old/", i), State: store.StateCompleted, Fence: 1}
		if ok, err := s.Put(ctx, rec, time.Millisecond); err != nil || !ok {
			t.Fatalf("Put: %v, %v", ok, err)
		}
	}
	time.Sleep(expired)
	if n, err := s.Sweep(ctx); err != nil || n != old {
		t.Fatalf("Sweep = %d, %v; want %d", n, err, old)
	}
	if n := len(docs(t, c, firestorestore.DefaultCollection)); n != foreign {
		t.Fatalf("%d documents left; want the %d foreign ones", n, foreign)
	}
}

// TestSweeper checks that the background sweeper collects expired
// records, logs its failures with their code and without keys, and stops.
func TestSweeper(t *testing.T) {
	t.Parallel()
	c := client(t, testenv.FirestoreProject(t))
	var logs sweepertest.Logs
	s := newStore(t, c, firestorestore.WithLogger(logs.Logger()))
	if _, err := s.Put(t.Context(), store.Record{Key: "secret-key", State: store.StateCompleted}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	sweepertest.Run(t, sweepertest.Sweeper{
		Start: s.StartSweeper,
		Collected: func(context.Context) (bool, error) {
			return len(docs(t, c, firestorestore.DefaultCollection)) == 0, nil
		},
		Break:   func() { _ = c.Close() },
		Logs:    &logs,
		Message: "firestorestore: sweeping expired records failed",
		Secret:  "secret-key",
	})
}
