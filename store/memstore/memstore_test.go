package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

func TestSweepDropsExpiredRecords(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New()
	s := memstore.New(memstore.WithClock(clock.Now))
	for i := range 100 {
		if _, err := s.Put(ctx, store.Record{Key: fmt.Sprint("old", i), State: store.StateCompleted, Fence: 1}, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Second)
	for i := range 300 {
		if _, err := s.Put(ctx, store.Record{Key: fmt.Sprint("live", i), State: store.StateCompleted, Fence: 1}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if n := memstore.Len(s); n != 300 {
		t.Fatalf("%d keys kept; want the 300 live ones after a sweep", n)
	}
}

// Released claims and deleted records go at once (the store's floor keeps
// their fences, not a tombstone); run-out claims are swept once their
// retention has passed.
func TestReleasedGoAtOnceRunOutClaimsAfterTheirRetention(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New()
	s := memstore.New(memstore.WithClock(clock.Now))
	for i := range 90 {
		k := fmt.Sprint("k", i)
		rec, claimed, err := s.Claim(ctx, k, "fp", time.Second)
		if err != nil || !claimed {
			t.Fatalf("Claim = %v, %v", claimed, err)
		}
		switch i % 3 {
		case 0:
			if ok, err := s.Release(ctx, k, rec.Fence); !ok || err != nil {
				t.Fatalf("Release = %v, %v", ok, err)
			}
		case 1:
			if ok, err := s.Delete(ctx, k); !ok || err != nil {
				t.Fatalf("Delete = %v, %v", ok, err)
			}
		}
	}
	if n := memstore.Len(s); n != 30 {
		t.Fatalf("%d keys kept after 30 releases and 30 deletions; want only the 30 claims", n)
	}
	clock.Advance(time.Second) // the leases run out; their claims are retained
	for i := range 300 {
		if _, _, err := s.Claim(ctx, fmt.Sprint("live", i), "fp", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if n := memstore.Len(s); n != 330 {
		t.Fatalf("%d keys kept; want the 300 live claims and the 30 run-out claims still retained", n)
	}
	clock.Advance(store.ClaimRetention)
	for i := range 400 {
		if _, _, err := s.Claim(ctx, fmt.Sprint("more", i), "fp", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if n := memstore.Len(s); n != 700 {
		t.Fatalf("%d keys kept; want only the 700 live claims", n)
	}
}

// A fence outlives the record that carried it, which is gone: a key
// released in the same millisecond it was claimed is claimed again with a
// greater fence.
func TestFencesGrowWithinOneMillisecond(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New()
	s := memstore.New(memstore.WithClock(clock.Now))
	var last store.Record
	for i := range 50 {
		rec, claimed, err := s.Claim(ctx, "k", "fp", time.Second)
		if err != nil || !claimed {
			t.Fatalf("Claim %d = %v, %v", i, claimed, err)
		}
		if rec.Fence <= last.Fence {
			t.Fatalf("claim %d has fence %v after %v", i, rec.Fence, last.Fence)
		}
		last = rec
		if i%2 == 0 {
			_, _ = s.Release(ctx, "k", rec.Fence)
		} else {
			_, _ = s.Delete(ctx, "k")
		}
		if n := memstore.Len(s); n != 0 {
			t.Fatalf("%d keys kept after the claim ended; want none", n)
		}
	}
}

// Fences keep growing when the clock steps back, after release, deletion
// and expiry alike, with nothing kept per key: one floor carries them.
func TestFencesGrowWhenTheClockStepsBack(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New()
	s := memstore.New(memstore.WithClock(clock.Now))
	var last idemkit.Fence
	for i, end := range []string{"release", "delete", "expiry", "release"} {
		rec, claimed, err := s.Claim(ctx, "k", "fp", time.Second)
		if err != nil || !claimed || rec.Fence <= last {
			t.Fatalf("claim %d: %v, %v, fence %v after %v; want a greater fence", i, claimed, err, rec.Fence, last)
		}
		last = rec.Fence
		switch end {
		case "release":
			_, _ = s.Release(ctx, "k", rec.Fence)
		case "delete":
			_, _ = s.Delete(ctx, "k")
		case "expiry":
			clock.Advance(time.Second + store.ClaimRetention)
			for j := range 300 { // enough writes for a sweep
				_, _, _ = s.Claim(ctx, fmt.Sprint("other", j), "fp", time.Millisecond)
			}
			if _, kept := memstore.FenceOf(s, "k"); kept {
				t.Fatal("the run-out claim was not swept")
			}
		}
		clock.Advance(-time.Hour) // the clock steps back an hour
	}
	if f := memstore.Floor(s); f < last {
		t.Fatalf("the floor %v is below the last fence %v", f, last)
	}
}

// The lock-id index holds only live-or-kept claims whose fingerprint is a
// lock id: a guard's fingerprint costs it nothing, and an ended claim
// leaves it.
func TestFindClaimIndexesLockIDsOnly(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New()
	s := memstore.New(memstore.WithClock(clock.Now))
	const id = "AAAAAAAAAAAAAAAAAAAAAA"
	rec, _, _ := s.Claim(ctx, "lock", id, time.Second)
	_, _, _ = s.Claim(ctx, "guard", "v1:0123456789abcdef", time.Second)
	if n := memstore.Indexed(s); n != 1 {
		t.Fatalf("%d ids indexed; want the lock's only", n)
	}
	if got, ok, err := s.FindClaim(ctx, id); err != nil || !ok || got.Key != "lock" || got.Fence != rec.Fence {
		t.Fatalf("FindClaim = %+v, %v, %v; want the lock's claim", got, ok, err)
	}
	if _, ok, _ := s.FindClaim(ctx, "v1:0123456789abcdef"); ok {
		t.Fatal("FindClaim found a guard's claim")
	}
	clock.Advance(time.Second)
	if _, ok, _ := s.FindClaim(ctx, id); ok {
		t.Fatal("FindClaim found a claim whose lease ran out")
	}
	taken, _, _ := s.Claim(ctx, "lock", "BBBBBBBBBBBBBBBBBBBBBB", time.Second)
	if _, ok, _ := s.FindClaim(ctx, id); ok || memstore.Indexed(s) != 1 {
		t.Fatal("the replaced claim's id is still indexed")
	}
	_, _ = s.Release(ctx, "lock", taken.Fence)
	if n := memstore.Indexed(s); n != 0 {
		t.Fatalf("%d ids indexed after the release; want none", n)
	}
}

func TestClaimAfterCloseIsServiceUnavailable(t *testing.T) {
	s := memstore.New()
	_ = s.Close()
	_ = s.Close()
	_, _, err := s.Claim(context.Background(), "k", "fp", time.Second)
	if err == nil || !errors.Is(err, memstore.ErrClosed) || idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable {
		t.Fatalf("Claim after Close = %v; want ServiceUnavailable wrapping ErrClosed", err)
	}
}

// A full store sweeps what expired at once, and refuses what still does
// not fit with RateLimited, changing nothing.
func TestFullStoreSweepsThenRefuses(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New()
	s := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxEntries(3), memstore.WithMaxBytes(4096))
	var claims []store.Record
	for i := range 3 {
		c, claimed, err := s.Claim(ctx, fmt.Sprint("k", i), "fp", time.Second)
		if err != nil || !claimed {
			t.Fatalf("Claim %d = %v, %v", i, claimed, err)
		}
		claims = append(claims, c)
	}
	if _, _, err := s.Claim(ctx, "k3", "fp", time.Second); idemkit.CodeOf(err) != idemkit.CodeRateLimited {
		t.Fatalf("a fourth key = %v; want RateLimited", err)
	}
	// The keys still held can be written: an outcome that fits, and a
	// release.
	out := claims[0]
	out.State, out.Response = store.StateCompleted, make([]byte, 1024)
	if ok, err := s.Complete(ctx, out, time.Hour); !ok || err != nil {
		t.Fatalf("Complete within the limits = %v, %v", ok, err)
	}
	// The outcome of a granted claim lands even beyond the byte limit (its
	// work ran; refusing it would let a retry run it again), and the store
	// then refuses new claims until it has room again.
	big := claims[1]
	big.State, big.Response = store.StateCompleted, make([]byte, 4096)
	if ok, err := s.Complete(ctx, big, time.Second); !ok || err != nil {
		t.Fatalf("Complete beyond the byte limit = %v, %v; want it recorded", ok, err)
	}
	if rec, ok, _ := s.Get(ctx, big.Key); !ok || rec.State != store.StateCompleted || len(rec.Response) != 4096 {
		t.Fatalf("the outcome beyond the byte limit: %+v, %v", rec, ok)
	}
	if _, bytes := memstore.Usage(s); bytes <= 4096 {
		t.Fatalf("%d bytes counted; want more than the 4096-byte limit", bytes)
	}
	if ok, err := s.Release(ctx, claims[2].Key, claims[2].Fence); !ok || err != nil {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	if _, _, err := s.Claim(ctx, "k4", "fp", time.Second); idemkit.CodeOf(err) != idemkit.CodeRateLimited {
		t.Fatalf("a new key in the full store = %v; want RateLimited", err)
	}
	// Once the claims ran out and their retention passed, a new key fits:
	// the full store swept at once.
	clock.Advance(time.Second + store.ClaimRetention)
	if _, claimed, err := s.Claim(ctx, "k3", "fp", time.Second); !claimed || err != nil {
		t.Fatalf("a new key after the sweep = %v, %v", claimed, err)
	}
	if n := memstore.Len(s); n != 2 {
		t.Fatalf("%d keys kept; want the outcome and the new claim", n)
	}
}

// An extension with a shorter TTL than the claim's brings the entry's
// removal forward: a full store sweeps it once that time has passed.
func TestSweepAfterShorterExtension(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New()
	s := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxEntries(1))
	rec, claimed, err := s.Claim(ctx, "k0", "fp", time.Hour)
	if err != nil || !claimed {
		t.Fatalf("Claim = %v, %v", claimed, err)
	}
	if _, ok, err := s.Extend(ctx, "k0", rec.Fence, time.Second); !ok || err != nil {
		t.Fatalf("Extend = %v, %v", ok, err)
	}
	clock.Advance(time.Second + store.ClaimRetention)
	if _, claimed, err := s.Claim(ctx, "k1", "fp", time.Hour); !claimed || err != nil {
		t.Fatalf("a new key once the extended claim's retention passed = %v, %v; want it claimed", claimed, err)
	}
	if n := memstore.Len(s); n != 1 {
		t.Fatalf("%d keys kept; want the new claim only", n)
	}
}
