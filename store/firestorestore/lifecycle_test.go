package firestorestore_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/leased"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// TestOneKeyThroughItsLifecycle walks one key through a claim, a refused second claim
// from another client, an extension, the outcome, its replay, a delete
// and a new claim, checking what each step answers and that the times
// come from Firestore.
func TestOneKeyThroughItsLifecycle(t *testing.T) {
	t.Parallel()
	p := testenv.FirestoreProject(t)
	a, b := newStore(t, client(t, p)), newStore(t, client(t, p))
	ctx := t.Context()
	rec, claimed, err := a.Claim(ctx, "order-1", "fp", time.Minute)
	if err != nil || !claimed || rec.State != store.StateClaimed || rec.Fence == 0 {
		t.Fatalf("Claim = %+v, %v, %v", rec, claimed, err)
	}
	if d := rec.ExpiresAt.Sub(rec.CreatedAt); d != time.Minute {
		t.Fatalf("the lease is %v; want 1m", d)
	}
	busy, claimed, err := b.Claim(ctx, "order-1", "fp", time.Minute)
	if err != nil || claimed || busy.Fence != rec.Fence || !busy.ExpiresAt.Equal(rec.ExpiresAt) || !busy.CreatedAt.Equal(rec.CreatedAt) {
		t.Fatalf("second Claim = %+v, %v, %v; want the first claim (%+v), busy", busy, claimed, err, rec)
	}
	if _, ok, err := a.Extend(ctx, "order-1", rec.Fence, 2*time.Minute); err != nil || !ok {
		t.Fatalf("Extend = %v, %v", ok, err)
	}
	got, ok, err := b.Get(ctx, "order-1")
	if err != nil || !ok || !got.ExpiresAt.After(rec.ExpiresAt) {
		t.Fatalf("Get after Extend = %+v, %v, %v", got, ok, err)
	}
	out := store.Record{Key: "order-1", Fingerprint: "fp", State: store.StateCompleted, Response: []byte("ok"), Fence: rec.Fence}
	if ok, err := a.Complete(ctx, out, time.Hour); err != nil || !ok {
		t.Fatalf("Complete = %v, %v", ok, err)
	}
	if ok, err := a.Complete(ctx, out, time.Hour); err != nil || ok {
		t.Fatalf("second Complete = %v, %v; want false", ok, err)
	}
	replay, claimed, err := b.Claim(ctx, "order-1", "fp", time.Minute)
	if err != nil || claimed || replay.State != store.StateCompleted || string(replay.Response) != "ok" || replay.Fence != rec.Fence {
		t.Fatalf("Claim of the outcome = %+v, %v, %v", replay, claimed, err)
	}
	if d := replay.ExpiresAt.Sub(replay.CreatedAt); d != time.Hour {
		t.Fatalf("the outcome lives %v; want 1h", d)
	}
	if deleted, err := b.Delete(ctx, "order-1"); err != nil || !deleted {
		t.Fatalf("Delete = %v, %v", deleted, err)
	}
	if _, ok, err := a.Get(ctx, "order-1"); err != nil || ok {
		t.Fatalf("Get after Delete = %v, %v", ok, err)
	}
	again, claimed, err := a.Claim(ctx, "order-1", "fp", time.Minute)
	if err != nil || !claimed || again.Fence <= rec.Fence {
		t.Fatalf("Claim after Delete = %+v, %v, %v; want a fence above %d", again, claimed, err, rec.Fence)
	}
	if ok, err := a.Release(ctx, "order-1", again.Fence); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	if ok, err := a.Release(ctx, "order-1", again.Fence); err != nil || ok {
		t.Fatalf("second Release = %v, %v; want false", ok, err)
	}
	third, claimed, err := b.Claim(ctx, "order-1", "fp", time.Minute)
	if err != nil || !claimed || third.Fence <= again.Fence {
		t.Fatalf("Claim after Release = %+v, %v, %v; want a fence above %d", third, claimed, err, again.Fence)
	}
	// b did not make the claim a made: it reads before it writes.
	if ok, err := b.Complete(ctx, store.Record{Key: "order-1", Fingerprint: "fp", State: store.StateNotReplayable, Fence: third.Fence}, time.Hour); err != nil || !ok {
		t.Fatalf("Complete through another store = %v, %v", ok, err)
	}
}

// TestTimesAreFirestores checks that every time a record carries is
// Firestore's: a claim's CreatedAt is the commit time of its write (the
// document's update time) and its ExpiresAt that plus the lease; an
// extension moves the lease to its own commit time and keeps CreatedAt; an
// outcome lives from its commit. The store has no clock of its own, so a
// node's clock cannot move any of them. Every document's expireAt is at or
// after leased.KeepUntil of its record.
func TestTimesAreFirestores(t *testing.T) {
	t.Parallel()
	c := client(t, testenv.FirestoreProject(t))
	s := newStore(t, c)
	ctx := t.Context()
	ref := c.Collection(firestorestore.DefaultCollection).Doc("order-1")
	snap := func() (time.Time, time.Time) {
		t.Helper()
		d, err := ref.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return d.UpdateTime, d.Data()[firestorestore.FieldExpireAt].(time.Time)
	}
	claim, claimed, err := s.Claim(ctx, "order-1", "fp", time.Minute)
	if err != nil || !claimed {
		t.Fatalf("Claim = %v, %v", claimed, err)
	}
	written, expireAt := snap()
	if !claim.CreatedAt.Equal(written) || !claim.ExpiresAt.Equal(written.Add(time.Minute)) {
		t.Fatalf("claim %v to %v; want the commit time %v plus the lease", claim.CreatedAt, claim.ExpiresAt, written)
	}
	if expireAt.Before(leased.KeepUntil(claim, leased.DefaultMaxClockStep)) {
		t.Fatalf("the claim's expireAt %v is before it may go (%v)", expireAt, leased.KeepUntil(claim, leased.DefaultMaxClockStep))
	}
	until, ok, err := s.Extend(ctx, "order-1", claim.Fence, 2*time.Minute)
	if err != nil || !ok {
		t.Fatalf("Extend = %v, %v", ok, err)
	}
	extended, expireAt := snap()
	got, _, err := s.Get(ctx, "order-1")
	if err != nil || !got.CreatedAt.Equal(claim.CreatedAt) || !got.ExpiresAt.Equal(extended.Add(2*time.Minute)) || !got.ExpiresAt.Equal(until) {
		t.Fatalf("extended claim %+v, %v; want created at %v, expiring at %v", got, err, claim.CreatedAt, extended.Add(2*time.Minute))
	}
	if expireAt.Before(leased.KeepUntil(got, leased.DefaultMaxClockStep)) {
		t.Fatalf("the extended claim's expireAt %v is before it may go (%v)", expireAt, leased.KeepUntil(got, leased.DefaultMaxClockStep))
	}
	out := store.Record{Key: "order-1", Fingerprint: "fp", State: store.StateCompleted, Response: []byte("ok"), Fence: claim.Fence}
	if ok, err := s.Complete(ctx, out, time.Hour); err != nil || !ok {
		t.Fatalf("Complete = %v, %v", ok, err)
	}
	completed, expireAt := snap()
	got, _, err = s.Get(ctx, "order-1")
	if err != nil || !got.CreatedAt.Equal(completed) || !got.ExpiresAt.Equal(completed.Add(time.Hour)) {
		t.Fatalf("outcome %+v, %v; want written at %v for an hour", got, err, completed)
	}
	if expireAt.Before(leased.KeepUntil(got, leased.DefaultMaxClockStep)) {
		t.Fatalf("the outcome's expireAt %v is before it may go (%v)", expireAt, leased.KeepUntil(got, leased.DefaultMaxClockStep))
	}
	if deleted, err := s.Delete(ctx, "order-1"); err != nil || !deleted {
		t.Fatalf("Delete = %v, %v", deleted, err)
	}
	if _, expireAt := snap(); !expireAt.Equal(leased.FenceFloor(claim.Fence, leased.DefaultMaxClockStep)) {
		t.Fatalf("the tombstone's expireAt %v is not when Firestore's clock passes its fence plus the largest clock step", expireAt)
	}
}
