package middleware_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// TestComposeFullWhileExtending fills a composed store to its claim limit
// and, while the holder of the one claim keeps extending it, makes other
// claims, each of which looks for room among the claims held: the holder's
// bookkeeping and the search for room must not race (run under -race),
// and the live claim must never be dropped to make room.
func TestComposeFullWhileExtending(t *testing.T) {
	t.Parallel()
	s, err := middleware.Compose(memstore.New(), newLocker(t, memstore.New()), middleware.WithMaxClaims(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	held, ok, err := s.Claim(ctx, "held", "fp", time.Minute)
	if err != nil || !ok {
		t.Fatalf("Claim = %v, %v", ok, err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, ok, err := s.Extend(ctx, "held", held.Fence, time.Minute); err != nil || !ok {
				t.Errorf("Extend = %v, %v", ok, err)
				return
			}
		}
	}()
	for range 200 {
		if _, ok, err := s.Claim(ctx, "other", "fp", time.Minute); ok || err == nil {
			t.Fatalf("Claim beyond the limit = %v, %v; want RateLimited", ok, err)
		}
	}
	close(stop)
	wg.Wait()
	if ok, err := s.Complete(ctx, store.Record{Key: "held", Fingerprint: "fp", State: store.StateCompleted, Fence: held.Fence}, time.Minute); err != nil || !ok {
		t.Fatalf("Complete of the held claim = %v, %v", ok, err)
	}
}
