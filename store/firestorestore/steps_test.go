package firestorestore_test

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc/codes"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// recordStep records step index of claim c through s, or fails the test.
func recordStep(t *testing.T, s *firestorestore.Store, c store.Record, index int, name, result string, keep time.Duration) {
	t.Helper()
	ok, err := s.RecordStep(t.Context(), c.Key, c.Fence, index, store.Step{Name: name, Result: []byte(result)}, keep)
	if err != nil || !ok {
		t.Fatalf("RecordStep %d %q = %v, %v", index, name, ok, err)
	}
}

// mustClaim claims key for fp through s, or fails the test.
func mustClaim(t *testing.T, s *firestorestore.Store, key, fp string, ttl time.Duration) store.Record {
	t.Helper()
	rec, claimed, err := s.Claim(t.Context(), key, fp, ttl)
	if err != nil || !claimed {
		t.Fatalf("Claim of %q = %+v, %v, %v", key, rec, claimed, err)
	}
	return rec
}

// stepNames returns the names of steps, comma-separated.
func stepNames(steps []store.Step) string {
	var n []string
	for _, s := range steps {
		n = append(n, s.Name)
	}
	return strings.Join(n, ",")
}

// snapshot reads the record document of key in the default collection.
func snapshot(t *testing.T, c *firestore.Client, key string) *firestore.DocumentSnapshot {
	t.Helper()
	snap, err := c.Collection(firestorestore.DefaultCollection).Doc(firestorestore.DocID(key)).Get(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// expireAt is the expireAt field of a record document.
func expireAt(t *testing.T, snap *firestore.DocumentSnapshot) time.Time {
	t.Helper()
	at, ok := snap.Data()[firestorestore.FieldExpireAt].(time.Time)
	if !ok {
		t.Fatalf("the document has no expireAt: %v", snap.Data())
	}
	return at
}

// TestStepRoundTrips counts the RPCs of steps: a step of a claim the store
// made or last wrote is one commit (conditioned on that write's update
// time), through another store a read and a commit; steps cost Extend and
// Release nothing more; a take-over that carries steps, of a released
// claim or of one whose lease ran out, is the read and the commit of any
// take-over.
func TestStepRoundTrips(t *testing.T) {
	t.Parallel()
	p := testenv.FirestoreProject(t)
	ca, ra := countingClient(t, p)
	cb, rb := countingClient(t, p)
	a, b := newStore(t, ca), newStore(t, cb)
	ctx := t.Context()
	want := func(rc *rpcCounter, what, by string) {
		t.Helper()
		if _, got := rc.take(); got != by {
			t.Errorf("%s: %s; want %s", what, got, by)
		}
	}
	ra.take()
	c := mustClaim(t, a, "order-1", "fp", time.Hour)
	want(ra, "the claim of a free key", "BatchGetDocuments=1 Commit=1")
	recordStep(t, a, c, 0, "reserve", "r-1", time.Hour)
	want(ra, "step 0", "Commit=1")
	recordStep(t, a, c, 1, "charge", "ch-1", time.Hour)
	want(ra, "step 1", "Commit=1")
	if _, ok, err := a.Extend(ctx, "order-1", c.Fence, time.Hour); err != nil || !ok {
		t.Fatalf("Extend = %v, %v", ok, err)
	}
	want(ra, "Extend of a claim with steps", "Commit=1")
	if ok, err := a.Release(ctx, "order-1", c.Fence); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	want(ra, "Release of a claim with steps", "Commit=1")

	rb.take()
	n := mustClaim(t, b, "order-1", "fp", time.Hour)
	want(rb, "the claim of a release's tombstone with steps", "BatchGetDocuments=1 Commit=1")
	if got := stepNames(n.Steps); got != "reserve,charge" {
		t.Fatalf("the claim after the release carries steps %q; want reserve,charge", got)
	}
	recordStep(t, b, n, 2, "email", "sent", time.Hour)
	want(rb, "step 2 of the carried steps", "Commit=1")
	if ok, err := b.Complete(ctx, store.Record{Key: "order-1", Fingerprint: "fp", State: store.StateCompleted, Fence: n.Fence, Response: []byte("ok")}, time.Hour); err != nil || !ok {
		t.Fatalf("Complete = %v, %v", ok, err)
	}
	want(rb, "Complete of a claim with steps", "Commit=1")

	// A store that did not make the claim reads it first.
	c = mustClaim(t, a, "order-2", "fp", time.Hour)
	rb.take()
	recordStep(t, b, c, 0, "reserve", "r-2", time.Hour)
	want(rb, "a step through another store", "BatchGetDocuments=1 Commit=1")

	// A claim whose lease ran out, taken over by another store.
	ra.take()
	c = mustClaim(t, a, "order-3", "fp", 50*time.Millisecond)
	recordStep(t, a, c, 0, "reserve", "r-3", time.Hour)
	time.Sleep(100 * time.Millisecond)
	rb.take()
	n = mustClaim(t, b, "order-3", "fp", time.Hour)
	want(rb, "the take-over of a run-out claim with steps", "BatchGetDocuments=1 Commit=1")
	if got := stepNames(n.Steps); got != "reserve" || n.Fence <= c.Fence {
		t.Fatalf("the take-over: fence %v (was %v), steps %q; want a greater fence and reserve", n.Fence, c.Fence, got)
	}
}

// TestStepsLayout looks at the documents: a claim's steps are a map of
// their index to their name and result, written with the lease the claim
// had (leaseUntil); a claim without steps, its extension, release and
// completion store neither field, and its tombstone no fingerprint, as
// before steps; a release's tombstone keeps the fingerprint and steps, a
// completion and a delete remove them.
func TestStepsLayout(t *testing.T) {
	t.Parallel()
	c := client(t, testenv.FirestoreProject(t))
	s := newStore(t, c)
	ctx := t.Context()
	without := func(what, key string, fields ...string) *firestore.DocumentSnapshot {
		t.Helper()
		snap := snapshot(t, c, key)
		for _, f := range fields {
			if v, ok := snap.Data()[f]; ok {
				t.Fatalf("%s: the document has %s = %v", what, f, v)
			}
		}
		return snap
	}

	plain := mustClaim(t, s, "plain", "fp", time.Hour)
	without("a claim without steps", "plain", "steps", "leaseUntil")
	if _, ok, err := s.Extend(ctx, "plain", plain.Fence, time.Hour); err != nil || !ok {
		t.Fatalf("Extend = %v, %v", ok, err)
	}
	without("an extended claim without steps", "plain", "steps", "leaseUntil")
	if ok, err := s.Release(ctx, "plain", plain.Fence); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	if fp := without("the tombstone of a claim without steps", "plain", "steps", "leaseUntil").Data()["fingerprint"]; fp != "" {
		t.Fatalf("the tombstone of a claim without steps keeps fingerprint %q", fp)
	}

	rec := mustClaim(t, s, "stepped", "fp", time.Hour)
	recordStep(t, s, rec, 0, "reserve", "r-1", time.Hour)
	recordStep(t, s, rec, 1, "charge", "", time.Hour)
	snap := snapshot(t, c, "stepped")
	m := snap.Data()
	steps, ok := m["steps"].(map[string]any)
	if !ok || len(steps) != 2 {
		t.Fatalf("the steps field is %#v; want a map of two steps", m["steps"])
	}
	for i, want := range []struct{ name, result string }{{"reserve", "r-1"}, {"charge", ""}} {
		step, _ := steps[string(rune('0'+i))].(map[string]any)
		if result, ok := step["result"].([]byte); step["name"] != want.name || !ok || string(result) != want.result {
			t.Fatalf("step %d is stored as %#v; want name %q, result bytes %q", i, step, want.name, want.result)
		}
	}
	if lease, ok := m["leaseUntil"].(time.Time); !ok || !lease.Equal(rec.ExpiresAt) || snap.UpdateTime.Equal(rec.CreatedAt) {
		t.Fatalf("after a step: leaseUntil %v, updated at %v; want the claim's lease %v, a write after %v", m["leaseUntil"], snap.UpdateTime, rec.ExpiresAt, rec.CreatedAt)
	}
	if ok, err := s.Release(ctx, "stepped", rec.Fence); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	m = without("the tombstone of a claim with steps", "stepped", "leaseUntil", "lockId").Data()
	if m["state"] != int64(0) || m["fingerprint"] != "fp" || len(m["steps"].(map[string]any)) != 2 {
		t.Fatalf("the tombstone of a claim with steps: state %v, fingerprint %v, steps %v; want 0, fp and its two steps", m["state"], m["fingerprint"], m["steps"])
	}
	rec = mustClaim(t, s, "stepped", "fp", time.Hour)
	if len(snapshot(t, c, "stepped").Data()["steps"].(map[string]any)) != 2 || stepNames(rec.Steps) != "reserve,charge" {
		t.Fatalf("the claim after the release carries %q", stepNames(rec.Steps))
	}
	if ok, err := s.Complete(ctx, store.Record{Key: "stepped", Fingerprint: "fp", State: store.StateCompleted, Fence: rec.Fence}, time.Hour); err != nil || !ok {
		t.Fatalf("Complete = %v, %v", ok, err)
	}
	without("the outcome of a claim with steps", "stepped", "steps", "leaseUntil")

	rec = mustClaim(t, s, "deleted", "fp", time.Hour)
	recordStep(t, s, rec, 0, "reserve", "r-1", time.Hour)
	if deleted, err := s.Delete(ctx, "deleted"); err != nil || !deleted {
		t.Fatalf("Delete = %v, %v", deleted, err)
	}
	if fp := without("the tombstone of a deleted claim with steps", "deleted", "steps", "leaseUntil").Data()["fingerprint"]; fp != "" {
		t.Fatalf("the tombstone of a delete keeps fingerprint %q", fp)
	}
}

// TestStepsKeep checks the document's expireAt, the TTL policy's field,
// against a step's keep: a step moves it to at least its keep past the
// commit and never earlier, without moving the lease; neither an
// extension nor a release's tombstone nor the claim that carries the
// steps on moves it earlier.
func TestStepsKeep(t *testing.T) {
	t.Parallel()
	c := client(t, testenv.FirestoreProject(t))
	s := newStore(t, c)
	ctx := t.Context()
	const keep = 3 * time.Hour
	rec := mustClaim(t, s, "order-1", "fp", time.Minute)
	recordStep(t, s, rec, 0, "reserve", "r-1", keep)
	snap := snapshot(t, c, "order-1")
	until := expireAt(t, snap)
	if until.Before(snap.UpdateTime.Add(keep)) {
		t.Fatalf("after a step kept %v: expireAt %v; want at least %v", keep, until, snap.UpdateTime.Add(keep))
	}
	got, _, err := s.Get(ctx, "order-1")
	if err != nil || !got.CreatedAt.Equal(rec.CreatedAt) || !got.ExpiresAt.Equal(rec.ExpiresAt) {
		t.Fatalf("Get after a step = %+v, %v; want the claim's lease as it was (%v to %v)", got, err, rec.CreatedAt, rec.ExpiresAt)
	}
	later := func(what string) {
		t.Helper()
		at := expireAt(t, snapshot(t, c, "order-1"))
		if at.Before(until) {
			t.Fatalf("%s moved expireAt from %v to %v, before the step's keep", what, until, at)
		}
		until = at
	}
	if _, ok, err := s.Extend(ctx, "order-1", rec.Fence, time.Second); err != nil || !ok {
		t.Fatalf("Extend = %v, %v", ok, err)
	}
	later("an extension")
	recordStep(t, s, rec, 1, "charge", "ch-1", time.Millisecond)
	later("a step with a shorter keep")
	if ok, err := s.Release(ctx, "order-1", rec.Fence); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	later("the release")
	n := mustClaim(t, s, "order-1", "fp", time.Minute)
	later("the claim that carries the steps")
	if stepNames(n.Steps) != "reserve,charge" {
		t.Fatalf("the claim after the release carries %q", stepNames(n.Steps))
	}
}

// TestSweepKeepsStepsForTheirKeep sweeps, on a store trusting the clock
// never to step back, two released claims: the tombstone of the one
// without steps may go at once and is deleted, the one whose step asked
// for an hour is kept, and the next claim carries its step.
func TestSweepKeepsStepsForTheirKeep(t *testing.T) {
	t.Parallel()
	c := client(t, testenv.FirestoreProject(t))
	s := newStore(t, c, firestorestore.WithMaxClockStep(0))
	ctx := t.Context()
	for _, key := range []string{"plain", "stepped"} {
		rec := mustClaim(t, s, key, "fp", time.Hour)
		if key == "stepped" {
			recordStep(t, s, rec, 0, "reserve", "r-1", time.Hour)
		}
		if ok, err := s.Release(ctx, key, rec.Fence); err != nil || !ok {
			t.Fatalf("Release = %v, %v", ok, err)
		}
	}
	time.Sleep(50 * time.Millisecond) // past the plain tombstone's fence
	if n, err := s.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1 (the tombstone without steps)", n, err)
	}
	if n := len(docs(t, c, firestorestore.DefaultCollection)); n != 1 {
		t.Fatalf("%d documents after the sweep; want the tombstone with steps", n)
	}
	if rec := mustClaim(t, s, "stepped", "fp", time.Hour); stepNames(rec.Steps) != "reserve" {
		t.Fatalf("the claim after the sweep carries %q; want reserve", stepNames(rec.Steps))
	}
}

// TestStepTooLargeForTheDocument claims a key with a fingerprint that
// leaves a record document about 10 KB: a step that fits is recorded,
// one that would bring the claim's document over the store's limit is
// refused with InvalidArgument matching store.ErrTooLarge, without a
// write (and for the store that made the claim, without an RPC), rather
// than sent for Firestore to refuse.
func TestStepTooLargeForTheDocument(t *testing.T) {
	t.Parallel()
	c, rc := countingClient(t, testenv.FirestoreProject(t))
	s, other := newStore(t, c), newStore(t, c)
	const key = "big"
	limit := firestorestore.MaxDocumentBytes - firestorestore.DocumentMargin
	fp := strings.Repeat("f", limit-10_000-docSize(firestorestore.DefaultCollection, key, "", 0))
	rec := mustClaim(t, s, key, fp, time.Hour)
	recordStep(t, s, rec, 0, "small", strings.Repeat("s", 8000), time.Hour)
	over := store.Step{Name: "over", Result: bytes.Repeat([]byte{1}, 5000)}
	for _, tc := range []struct {
		name string
		s    *firestorestore.Store
		rpcs string
	}{{"the store that made the claim", s, ""}, {"another store", other, "BatchGetDocuments=1"}} {
		rc.take()
		ok, err := tc.s.RecordStep(t.Context(), key, rec.Fence, 1, over, time.Hour)
		if ok || !errors.Is(err, store.ErrTooLarge) || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("%s: a step over the document limit = %v, %v; want InvalidArgument matching store.ErrTooLarge", tc.name, ok, err)
		}
		if _, by := rc.take(); by != tc.rpcs {
			t.Fatalf("%s: the refused step sent %q; want %q", tc.name, by, tc.rpcs)
		}
	}
	if got, _, err := s.Get(t.Context(), key); err != nil || stepNames(got.Steps) != "small" {
		t.Fatalf("Get after the refused step: %q, %v; want the first step alone", stepNames(got.Steps), err)
	}
	recordStep(t, s, rec, 1, "fits", strings.Repeat("s", 1000), time.Hour)
}

// TestStepCommitAnswerLost loses the answer to a step's commit after it
// landed: the client's retry fails its precondition, and the read that
// settles it finds the step's write id, so RecordStep answers true, the
// step is there once, and the next step is one commit again.
func TestStepCommitAnswerLost(t *testing.T) {
	t.Parallel()
	f := &commitFault{fault: codes.Unavailable, landed: true}
	s := newStore(t, faultyClient(t, testenv.FirestoreProject(t), f))
	rec := mustClaim(t, s, "order-1", "fp", time.Hour)
	f.armed.Store(true)
	ok, err := s.RecordStep(t.Context(), "order-1", rec.Fence, 0, store.Step{Name: "reserve"}, time.Hour)
	if err != nil || !ok {
		t.Fatalf("RecordStep = %v, %v; want true (the write landed)", ok, err)
	}
	if n := f.commits.Load(); n < 2 {
		t.Fatalf("%d commits; want the client's retry of the lost one", n)
	}
	before := f.commits.Load() // the fault is spent: later commits pass
	recordStep(t, s, rec, 1, "charge", "ch-1", time.Hour)
	if n := f.commits.Load() - before; n != 1 {
		t.Fatalf("the next step took %d commits; want 1", n)
	}
	if got, _, err := s.Get(t.Context(), "order-1"); err != nil || stepNames(got.Steps) != "reserve,charge" {
		t.Fatalf("Get = %q, %v; want reserve,charge", stepNames(got.Steps), err)
	}
}

// TestWritesWithoutStepsNameNoStepFields looks at the commits a key
// without steps costs (a claim, its extension, release and take-over, a
// completion, a delete, a put): none names a field of steps, so they are
// what they were before steps; a completion of a claim with steps removes
// both.
func TestWritesWithoutStepsNameNoStepFields(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		paths []string // the field paths of the commits' updates
	)
	c := client(t, testenv.FirestoreProject(t), intercept(func(_ string, req any, call func() error) error {
		if r, ok := req.(*pb.CommitRequest); ok {
			mu.Lock()
			for _, w := range r.Writes {
				paths = append(paths, w.GetUpdateMask().GetFieldPaths()...)
			}
			mu.Unlock()
		}
		return call()
	})...)
	s := newStore(t, c)
	ctx := t.Context()
	take := func() string {
		mu.Lock()
		defer mu.Unlock()
		p := strings.Join(paths, " ")
		paths = nil
		return p
	}
	rec := mustClaim(t, s, "order-1", "fp", time.Hour)
	if _, ok, err := s.Extend(ctx, "order-1", rec.Fence, time.Hour); err != nil || !ok {
		t.Fatalf("Extend = %v, %v", ok, err)
	}
	if ok, err := s.Release(ctx, "order-1", rec.Fence); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	rec = mustClaim(t, s, "order-1", "fp", time.Hour)
	if ok, err := s.Complete(ctx, store.Record{Key: "order-1", Fingerprint: "fp", State: store.StateCompleted, Fence: rec.Fence}, time.Hour); err != nil || !ok {
		t.Fatalf("Complete = %v, %v", ok, err)
	}
	if deleted, err := s.Delete(ctx, "order-1"); err != nil || !deleted {
		t.Fatalf("Delete = %v, %v", deleted, err)
	}
	if ok, err := s.Put(ctx, store.Record{Key: "order-1", State: store.StateCompleted, Fence: rec.Fence + 1}, time.Hour); err != nil || !ok {
		t.Fatalf("Put = %v, %v", ok, err)
	}
	p := take()
	if p == "" {
		t.Fatal("no update masks seen")
	}
	for _, f := range strings.Fields(p) {
		if strings.HasPrefix(f, "steps") || f == "leaseUntil" {
			t.Fatalf("a write of a key without steps names %s (all: %s)", f, p)
		}
	}
	rec = mustClaim(t, s, "order-2", "fp", time.Hour)
	recordStep(t, s, rec, 0, "reserve", "r-1", time.Hour)
	take()
	if ok, err := s.Complete(ctx, store.Record{Key: "order-2", Fingerprint: "fp", State: store.StateCompleted, Fence: rec.Fence}, time.Hour); err != nil || !ok {
		t.Fatalf("Complete = %v, %v", ok, err)
	}
	if p := " " + take() + " "; !strings.Contains(p, " steps ") || !strings.Contains(p, " leaseUntil ") {
		t.Fatalf("the completion of a claim with steps names %s; want steps and leaseUntil removed", p)
	}
}

// TestDeleteDropsLeftSteps deletes the steps a claim left for the next
// claim of its fingerprint: a release's tombstone with steps, and a claim
// with steps whose lease ran out, become a plain tombstone of the same
// fence (no fingerprint, no steps, expireAt its fence's floor) in a read
// and a commit; Delete reports false (nothing live was there), the run-out
// claim can no longer complete, and the next claim starts without steps
// and with a greater fence. A Delete that finds nothing with steps (no
// document, a tombstone without steps, a run-out claim without steps)
// stays a read alone, and that of a live claim a read and a commit.
func TestDeleteDropsLeftSteps(t *testing.T) {
	t.Parallel()
	c, rc := countingClient(t, testenv.FirestoreProject(t))
	s := newStore(t, c)
	ctx := t.Context()
	del := func(key string, want bool, rpcs string) {
		t.Helper()
		rc.take()
		if deleted, err := s.Delete(ctx, key); err != nil || deleted != want {
			t.Fatalf("Delete of %s = %v, %v; want %v", key, deleted, err, want)
		}
		if _, by := rc.take(); by != rpcs {
			t.Fatalf("Delete of %s sent %s; want %s", key, by, rpcs)
		}
	}
	plain := func(key string, fence idemkit.Fence) {
		t.Helper()
		snap := snapshot(t, c, key)
		m := snap.Data()
		for _, f := range []string{"steps", "leaseUntil", "lockId"} {
			if v, ok := m[f]; ok {
				t.Fatalf("%s after the delete: the document has %s = %v", key, f, v)
			}
		}
		floor := time.UnixMilli(int64(fence) + 1).Add(time.Minute) // the fence's floor under the default clock step
		if m["state"] != int64(0) || m["fingerprint"] != "" || m["fence"] != int64(fence) || !expireAt(t, snap).Equal(floor) {
			t.Fatalf("%s after the delete: state %v, fingerprint %q, fence %v, expireAt %v; want a tombstone of fence %v expiring at %v",
				key, m["state"], m["fingerprint"], m["fence"], expireAt(t, snap), fence, floor)
		}
	}
	fresh := func(key string, after idemkit.Fence) {
		t.Helper()
		n := mustClaim(t, s, key, "fp", time.Hour)
		if len(n.Steps) != 0 || n.Fence <= after {
			t.Fatalf("the claim of %s after the delete: fence %v, steps %q; want none and a fence above %v", key, n.Fence, stepNames(n.Steps), after)
		}
	}

	rec := mustClaim(t, s, "released", "fp", time.Hour)
	recordStep(t, s, rec, 0, "reserve", "r-1", time.Hour)
	if ok, err := s.Release(ctx, "released", rec.Fence); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	del("released", false, "BatchGetDocuments=1 Commit=1")
	plain("released", rec.Fence)
	del("released", false, "BatchGetDocuments=1") // nothing with steps left
	fresh("released", rec.Fence)

	rec = mustClaim(t, s, "ran-out", "fp", 50*time.Millisecond)
	recordStep(t, s, rec, 0, "reserve", "r-1", time.Hour)
	time.Sleep(100 * time.Millisecond)
	del("ran-out", false, "BatchGetDocuments=1 Commit=1")
	plain("ran-out", rec.Fence)
	if ok, err := s.Complete(ctx, store.Record{Key: "ran-out", Fingerprint: "fp", State: store.StateCompleted, Fence: rec.Fence}, time.Hour); err != nil || ok {
		t.Fatalf("Complete of the run-out claim after the delete = %v, %v; want false", ok, err)
	}
	fresh("ran-out", rec.Fence)

	del("none", false, "BatchGetDocuments=1")
	rec = mustClaim(t, s, "plain-released", "fp", time.Hour)
	if ok, err := s.Release(ctx, "plain-released", rec.Fence); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	del("plain-released", false, "BatchGetDocuments=1")
	rec = mustClaim(t, s, "plain-ran-out", "fp", 50*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	del("plain-ran-out", false, "BatchGetDocuments=1")
	if ok, err := s.Complete(ctx, store.Record{Key: "plain-ran-out", Fingerprint: "fp", State: store.StateCompleted, Fence: rec.Fence}, time.Hour); err != nil || !ok {
		t.Fatalf("Complete of a run-out claim without steps after a delete = %v, %v; want true, as before", ok, err)
	}
	rec = mustClaim(t, s, "live", "fp", time.Hour)
	recordStep(t, s, rec, 0, "reserve", "r-1", time.Hour)
	del("live", true, "BatchGetDocuments=1 Commit=1")
	plain("live", rec.Fence)
}

// TestDeleteOfLeftStepsAnswerLost loses the answer to the commit that
// drops a release's steps after it landed: the read that settles it finds
// the write, and Delete still reports false (nothing live was there),
// without an error; the steps are gone.
func TestDeleteOfLeftStepsAnswerLost(t *testing.T) {
	t.Parallel()
	f := &commitFault{fault: codes.Unavailable, landed: true}
	s := newStore(t, faultyClient(t, testenv.FirestoreProject(t), f))
	ctx := t.Context()
	rec := mustClaim(t, s, "order-1", "fp", time.Hour)
	recordStep(t, s, rec, 0, "reserve", "r-1", time.Hour)
	if ok, err := s.Release(ctx, "order-1", rec.Fence); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	f.armed.Store(true)
	if deleted, err := s.Delete(ctx, "order-1"); err != nil || deleted {
		t.Fatalf("Delete = %v, %v; want false, nil", deleted, err)
	}
	if n := f.commits.Load(); n < 2 {
		t.Fatalf("%d commits; want the client's retry of the lost one", n)
	}
	if n := mustClaim(t, s, "order-1", "fp", time.Hour); len(n.Steps) != 0 {
		t.Fatalf("the claim after the delete carries %q; want none", stepNames(n.Steps))
	}
}
