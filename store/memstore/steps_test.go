package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// A claim released with steps leaves what the next claim needs (counted
// against the byte limit, invisible to Get) until its steps' keep, and the
// sweep then drops it, raising the floor to its fence.
func TestReleasedStepsKeptUntilTheirKeepThenSwept(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New()
	s := memstore.New(memstore.WithClock(clock.Now))
	c, _, err := s.Claim(ctx, "k", "fp", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, before := memstore.Usage(s)
	step := store.Step{Name: "charge", Result: []byte("ch_1")}
	if ok, err := s.RecordStep(ctx, "k", c.Fence, 0, step, 2*time.Hour); !ok || err != nil {
		t.Fatalf("RecordStep = %v, %v", ok, err)
	}
	if _, b := memstore.Usage(s); b != before+step.Size() {
		t.Fatalf("%d bytes counted after a step of %d; want %d", b, step.Size(), before+step.Size())
	}
	if ok, err := s.Release(ctx, "k", c.Fence); !ok || err != nil {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	if n := memstore.Len(s); n != 1 {
		t.Fatalf("%d keys kept after the release of a claim with steps; want 1", n)
	}
	if _, ok, _ := s.Get(ctx, "k"); ok {
		t.Fatal("Get sees the released claim")
	}
	// Past its lease and retention, within the keep: still there.
	clock.Advance(time.Hour)
	for i := range 300 {
		if _, _, err := s.Claim(ctx, fmt.Sprint("other", i), "fp", 3*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if f, ok := memstore.FenceOf(s, "k"); !ok || f != c.Fence {
		t.Fatalf("the released claim's steps were swept within their keep (fence %v, %v)", f, ok)
	}
	// Past the keep: swept, and its bytes with it.
	clock.Advance(time.Hour + time.Second)
	for i := range 400 {
		if _, _, err := s.Claim(ctx, fmt.Sprint("more", i), "fp", 3*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := memstore.FenceOf(s, "k"); ok {
		t.Fatal("the released claim's steps outlived their keep")
	}
	if memstore.Floor(s) < c.Fence {
		t.Fatalf("floor %v after the sweep; want at least the swept fence %v", memstore.Floor(s), c.Fence)
	}
	n, b := memstore.Usage(s)
	want := 0
	for i := range 300 {
		want += 128 + len(fmt.Sprint("other", i)) + len("fp")
	}
	for i := range 400 {
		want += 128 + len(fmt.Sprint("more", i)) + len("fp")
	}
	if n != 700 || b != want {
		t.Fatalf("usage %d keys, %d bytes; want 700 keys, %d bytes", n, b, want)
	}
}

// A completion drops the steps' bytes with the steps; a Delete drops the
// steps a released claim left, though it reports no record.
func TestStepsGoWithTheOutcomeAndWithADelete(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	c, _, _ := s.Claim(ctx, "k", "fp", time.Minute)
	_, before := memstore.Usage(s)
	if ok, err := s.RecordStep(ctx, "k", c.Fence, 0, store.Step{Name: "a", Result: make([]byte, 1000)}, time.Hour); !ok || err != nil {
		t.Fatalf("RecordStep = %v, %v", ok, err)
	}
	if ok, err := s.Complete(ctx, store.Record{Key: "k", Fingerprint: "fp", State: store.StateCompleted, Fence: c.Fence, Steps: []store.Step{{Name: "a"}}}, time.Hour); !ok || err != nil {
		t.Fatalf("Complete = %v, %v", ok, err)
	}
	if _, b := memstore.Usage(s); b != before {
		t.Fatalf("%d bytes counted after the completion; want %d (no steps)", b, before)
	}
	if got, _, _ := s.Get(ctx, "k"); len(got.Steps) != 0 {
		t.Fatalf("the outcome has steps %v", got.Steps)
	}

	c, _, _ = s.Claim(ctx, "d", "fp", time.Minute)
	if ok, err := s.RecordStep(ctx, "d", c.Fence, 0, store.Step{Name: "a"}, time.Hour); !ok || err != nil {
		t.Fatalf("RecordStep = %v, %v", ok, err)
	}
	s.Release(ctx, "d", c.Fence)
	if ok, err := s.Delete(ctx, "d"); ok || err != nil {
		t.Fatalf("Delete of a released claim = %v, %v; want false (no record)", ok, err)
	}
	if _, ok := memstore.FenceOf(s, "d"); ok {
		t.Fatal("Delete left the released claim's steps")
	}
	n, _, _ := s.Claim(ctx, "d", "fp", time.Minute)
	if len(n.Steps) != 0 || n.Fence <= c.Fence {
		t.Fatalf("claim after the Delete: steps %v, fence %v; want none, above %v", n.Steps, n.Fence, c.Fence)
	}
}

// A step lands on a full store, as an outcome does: its work already ran.
func TestStepLandsOnAFullStore(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(memstore.WithMaxBytes(300))
	c, _, err := s.Claim(ctx, "k", "fp", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.RecordStep(ctx, "k", c.Fence, 0, store.Step{Name: "big", Result: make([]byte, 1000)}, time.Hour); !ok || err != nil {
		t.Fatalf("RecordStep beyond the byte limit = %v, %v; want it to land", ok, err)
	}
	if _, _, err := s.Claim(ctx, "k2", "fp", time.Minute); err == nil {
		t.Fatal("a new claim was granted while the step holds the store beyond its byte limit")
	}
}
