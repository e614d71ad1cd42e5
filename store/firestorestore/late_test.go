package firestorestore_test

import (
	"sync/atomic"
	"testing"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
)

// lateWrites returns a store whose next commit, once arm is called, is
// held back for d before it is sent: a write sent while the lease is live
// that commits after it ran out.
func lateWrites(t *testing.T, project string, d time.Duration) (s store.Store, arm func()) {
	t.Helper()
	var armed atomic.Bool
	c := client(t, project, intercept(func(_ string, req any, call func() error) error {
		if _, ok := req.(*pb.CommitRequest); ok && armed.CompareAndSwap(true, false) {
			time.Sleep(d)
		}
		return call()
	})...)
	return newStore(t, c), func() { armed.Store(true) }
}

// TestLateExtensionIsVoid sends a claim's extension while its lease is
// live (one commit, conditioned on the claim's update time) and lets it
// commit only after the lease ran out: Extend answers false, and the
// extension is void for every reader — Get finds no live claim, another
// node takes the key over — while the holder can still complete a claim
// nobody replaced.
func TestLateExtensionIsVoid(t *testing.T) {
	t.Parallel()
	project := testenv.FirestoreProject(t)
	s, arm := lateWrites(t, project, 1500*time.Millisecond)
	other := newStore(t, client(t, project))
	ctx := t.Context()
	for _, then := range []string{"complete", "take over"} {
		c, claimed, err := s.Claim(ctx, then, "fp", time.Second)
		if err != nil || !claimed {
			t.Fatalf("Claim = %v, %v", claimed, err)
		}
		arm()
		if until, ok, err := s.Extend(ctx, then, c.Fence, time.Hour); err != nil || ok {
			t.Fatalf("%s: an Extend that committed after the lease ran out = %v, %v, %v; want false", then, until, ok, err)
		}
		if rec, ok, err := other.Get(ctx, then); err != nil || ok {
			t.Fatalf("%s: Get after a void extension = %+v, %v, %v; want nothing live", then, rec, ok, err)
		}
		if then == "complete" {
			out := store.Record{Key: then, Fingerprint: "fp", State: store.StateCompleted, Response: []byte("late"), Fence: c.Fence}
			if ok, err := s.Complete(ctx, out, time.Hour); err != nil || !ok {
				t.Fatalf("Complete of the run-out claim = %v, %v; want it completed", ok, err)
			}
			continue
		}
		next, claimed, err := other.Claim(ctx, then, "fp2", time.Hour)
		if err != nil || !claimed || next.Fence <= c.Fence {
			t.Fatalf("another node's Claim after a void extension = %+v, %v, %v; want a new claim", next, claimed, err)
		}
	}
}

// TestLateReleaseAnswersFalse sends a claim's release while its lease is
// live and lets it commit only after the lease ran out: Release answers
// false (the key was free to claim either way), and the key is claimable
// with a greater fence.
func TestLateReleaseAnswersFalse(t *testing.T) {
	t.Parallel()
	project := testenv.FirestoreProject(t)
	s, arm := lateWrites(t, project, 1500*time.Millisecond)
	ctx := t.Context()
	c, claimed, err := s.Claim(ctx, "k", "fp", time.Second)
	if err != nil || !claimed {
		t.Fatalf("Claim = %v, %v", claimed, err)
	}
	arm()
	if ok, err := s.Release(ctx, "k", c.Fence); err != nil || ok {
		t.Fatalf("a Release that committed after the lease ran out = %v, %v; want false", ok, err)
	}
	next, claimed, err := s.Claim(ctx, "k", "fp", time.Hour)
	if err != nil || !claimed || next.Fence <= c.Fence {
		t.Fatalf("Claim after the late release = %+v, %v, %v; want a new claim with a greater fence", next, claimed, err)
	}
}
