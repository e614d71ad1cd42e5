package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// A request claims its key, runs, and completes the claim with its outcome;
// a retry's claim returns the outcome instead of a new claim.
func Example() {
	ctx := context.Background()
	s := memstore.New()

	claim, claimed, _ := s.Claim(ctx, "orders:42", "fp-1", 30*time.Second)
	fmt.Println("first claim:", claimed, claim.State)

	_, busy, _ := s.Claim(ctx, "orders:42", "fp-1", 30*time.Second)
	fmt.Println("second claim while running:", busy)

	out := claim
	out.State, out.Response = store.StateCompleted, []byte(`{"order":42}`)
	ok, _ := s.Complete(ctx, out, 24*time.Hour)
	fmt.Println("completed:", ok)

	rec, claimed, _ := s.Claim(ctx, "orders:42", "fp-1", 30*time.Second)
	fmt.Println("retry:", claimed, rec.State, string(rec.Response))
	// Output:
	// first claim: true claimed
	// second claim while running: false
	// completed: true
	// retry: false completed {"order":42}
}

// A holder whose lease ran out and whose key was claimed again can no
// longer complete: its fence is stale.
func Example_staleHolder() {
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := memstore.New(memstore.WithClock(func() time.Time { return now }))

	first, _, _ := s.Claim(ctx, "orders:7", "fp", time.Second)
	now = now.Add(2 * time.Second) // the first holder's lease runs out
	second, claimed, _ := s.Claim(ctx, "orders:7", "fp", time.Second)
	fmt.Println("taken over:", claimed, second.Fence > first.Fence)

	stale := first
	stale.State = store.StateCompleted
	ok, _ := s.Complete(ctx, stale, time.Hour)
	fmt.Println("stale holder completes:", ok)
	// Output:
	// taken over: true true
	// stale holder completes: false
}

// Put is the fenced plain put of [store.Records]: a writer holding an older
// lock's fence cannot overwrite the record of a newer one.
func ExampleStore_Put() {
	ctx := context.Background()
	s := memstore.New()

	rec := store.Record{Key: "orders:42", State: store.StateCompleted, Response: []byte(`{"order":42}`), Fence: 2}
	ok, _ := s.Put(ctx, rec, 24*time.Hour)
	fmt.Println("fence 2 written:", ok)

	stale := rec
	stale.Fence, stale.Response = 1, []byte(`{"order":"stale"}`)
	ok, _ = s.Put(ctx, stale, 24*time.Hour)
	fmt.Println("fence 1 written:", ok)

	got, _, _ := s.Get(ctx, "orders:42")
	fmt.Println(got.State, string(got.Response), got.Fence)
	// Output:
	// fence 2 written: true
	// fence 1 written: false
	// completed {"order":42} 000000000000002
}
