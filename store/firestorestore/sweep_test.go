package firestorestore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/internal/sweepertest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock/firestoretest"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// TestSweep checks that Sweep deletes, in batches, exactly the documents
// whose expireAt has passed by the client clock: not live records, not
// records expired less than lock.CleanupGrace ago, not records written
// again since they expired.
func TestSweep(t *testing.T) {
	t.Parallel()
	c := firestoretest.Client(t, testenv.FirestoreProject(t))
	clock := fakeclock.New()
	s := newStore(t, c, firestorestore.WithClock(clock.Now), firestorestore.WithSweepBatch(2), firestorestore.WithSkewTolerance(0))
	ctx := t.Context()
	put := func(k string, ttl time.Duration) {
		t.Helper()
		rec := store.Record{Key: k, State: store.StateCompleted, Response: []byte(k), Fence: 1}
		if ok, err := s.Put(ctx, rec, ttl); err != nil || !ok {
			t.Fatalf("Put: %v, %v", ok, err)
		}
	}
	sweep := func(want int) {
		t.Helper()
		if n, err := s.Sweep(ctx); err != nil || n != want {
			t.Fatalf("Sweep = %d, %v; want %d", n, err, want)
		}
	}
	const expired = 5
	for i := range expired {
		put(fmt.Sprint("old/", i), time.Minute)
	}
	put("renewed", time.Minute)
	put("live", time.Hour)

	clock.Advance(time.Minute)
	if _, ok, err := s.Get(ctx, "old/0"); err != nil || ok {
		t.Fatalf("an expired record is visible: %v, %v", ok, err)
	}
	sweep(0) // expired, but within the cleanup grace
	put("renewed", time.Hour)

	clock.Advance(lock.CleanupGrace)
	sweep(expired)
	if n := count(t, c, firestorestore.DefaultCollection); n != 2 {
		t.Fatalf("%d documents left; want the live and the renewed one", n)
	}
	for _, k := range []string{"live", "renewed"} {
		if _, ok, err := s.Get(ctx, k); err != nil || !ok {
			t.Fatalf("%s: %v, %v", k, ok, err)
		}
	}
	sweep(0)
}

// TestSweeper checks that the background sweeper collects expired
// records, logs its failures with their code and without keys, and stops.
func TestSweeper(t *testing.T) {
	t.Parallel()
	c := firestoretest.Client(t, testenv.FirestoreProject(t))
	clock := fakeclock.New()
	var logs sweepertest.Logs
	s := newStore(t, c, firestorestore.WithClock(clock.Now), firestorestore.WithSkewTolerance(0),
		firestorestore.WithLogger(logs.Logger()))
	if _, err := s.Put(t.Context(), store.Record{Key: "secret-key", State: store.StateCompleted}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Millisecond + lock.CleanupGrace)
	sweepertest.Run(t, sweepertest.Sweeper{
		Start: s.StartSweeper,
		Collected: func(context.Context) (bool, error) {
			return count(t, c, firestorestore.DefaultCollection) == 0, nil
		},
		Break:   func() { _ = c.Close() },
		Logs:    &logs,
		Message: "firestorestore: sweeping expired records failed",
		Secret:  "secret-key",
	})
}

// TestSweepPagesPastForeignDocuments puts more documents that the sweep
// leaves alone (not this store's: an expireAt in the past but no
// expiresAt) than a batch holds at the head of the expireAt order: the
// sweep pages past them and still deletes the expired records behind
// them.
func TestSweepPagesPastForeignDocuments(t *testing.T) {
	t.Parallel()
	c := firestoretest.Client(t, testenv.FirestoreProject(t))
	clock := fakeclock.New()
	s := newStore(t, c, firestorestore.WithClock(clock.Now), firestorestore.WithSweepBatch(2), firestorestore.WithSkewTolerance(0))
	ctx := t.Context()
	const foreign, expired = 5, 3
	for i := range foreign {
		doc := map[string]any{"other": int64(i), firestorestore.FieldExpireAt: clock.Now().Add(-time.Hour)}
		if _, err := c.Collection(firestorestore.DefaultCollection).Doc(fmt.Sprint("foreign-", i)).Set(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	for i := range expired {
		rec := store.Record{Key: fmt.Sprint("old/", i), State: store.StateCompleted, Fence: 1}
		if ok, err := s.Put(ctx, rec, time.Minute); err != nil || !ok {
			t.Fatalf("Put: %v, %v", ok, err)
		}
	}
	clock.Advance(time.Minute + lock.CleanupGrace)
	if n, err := s.Sweep(ctx); err != nil || n != expired {
		t.Fatalf("Sweep = %d, %v; want %d", n, err, expired)
	}
	if n := count(t, c, firestorestore.DefaultCollection); n != foreign {
		t.Fatalf("%d documents left; want the %d foreign ones", n, foreign)
	}
}
