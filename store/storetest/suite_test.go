package storetest_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
	"github.com/idemkit/idemkit/store/memstore"
	"github.com/idemkit/idemkit/store/storetest"
)

// gated is a store.Store whose every call is one round trip through a
// gate that can be shut, as a stalled server is: a call waits for the gate
// to open or its ctx to end. It lets the suite's optional cases (stalled
// servers, round trips) run against the in-memory store.
type gated struct {
	store.Store
	trips atomic.Int64

	mu   sync.Mutex
	open chan struct{} // closed while the gate is open
}

func newGated(s store.Store) *gated {
	g := &gated{Store: s, open: make(chan struct{})}
	close(g.open)
	return g
}

// stall shuts the gate and returns the function that opens it again.
func (g *gated) stall() (resume func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch := make(chan struct{})
	g.open = ch
	return sync.OnceFunc(func() { close(ch) })
}

func (g *gated) pass(ctx context.Context, op string) error {
	g.trips.Add(1)
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return idemkit.CheckContext(ctx, op)
	}
}

func (g *gated) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	if err := engine.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := engine.ValidateTTL("claim", ttl); err != nil {
		return store.Record{}, false, err
	}
	if err := g.pass(ctx, "claim"); err != nil {
		return store.Record{}, false, err
	}
	return g.Store.Claim(ctx, key, fp, ttl)
}

func (g *gated) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	if err := engine.ValidateFenced("extend", key, fence); err != nil {
		return time.Time{}, false, err
	}
	if err := engine.ValidateTTL("extend", ttl); err != nil {
		return time.Time{}, false, err
	}
	if err := g.pass(ctx, "extend"); err != nil {
		return time.Time{}, false, err
	}
	return g.Store.Extend(ctx, key, fence, ttl)
}

func (g *gated) Complete(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	if err := engine.ValidateComplete(rec, ttl); err != nil {
		return false, err
	}
	if err := g.pass(ctx, "complete"); err != nil {
		return false, err
	}
	return g.Store.Complete(ctx, rec, ttl)
}

func (g *gated) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	if err := engine.ValidateFenced("release", key, fence); err != nil {
		return false, err
	}
	if err := g.pass(ctx, "release"); err != nil {
		return false, err
	}
	return g.Store.Release(ctx, key, fence)
}

func (g *gated) Get(ctx context.Context, key string) (store.Record, bool, error) {
	if err := engine.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := g.pass(ctx, "get"); err != nil {
		return store.Record{}, false, err
	}
	return g.Store.Get(ctx, key)
}

func (g *gated) Delete(ctx context.Context, key string) (bool, error) {
	if err := engine.ValidateKey(key); err != nil {
		return false, err
	}
	if err := g.pass(ctx, "delete"); err != nil {
		return false, err
	}
	return g.Store.Delete(ctx, key)
}

// The whole suite, its optional cases included, passes on a store that
// keeps the contract.
func TestSuiteWithEveryCapability(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		clock := fakeclock.New()
		s := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxResponseBytes(1<<20))
		t.Cleanup(func() { _ = s.Close() })
		g := newGated(s)
		return &storetest.Env{
			Store:            g,
			Advance:          clock.Advance,
			Break:            func() { _ = s.Close() },
			Stall:            g.stall,
			MaxResponseBytes: 1 << 20,
			RoundTrips:       func() int { return int(g.trips.Load()) },
			MaxRoundTrips:    storetest.RoundTripLimits{TakeOver: 1},
		}
	})
}
