package middleware_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/memlock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
	"github.com/idemkit/idemkit/store/storetest"
)

// countedRecords counts the calls to a store.Records: each is one round
// trip to its backend.
type countedRecords struct {
	store.Records
	n *atomic.Int64
}

func (c countedRecords) Get(ctx context.Context, key string) (store.Record, bool, error) {
	c.n.Add(1)
	return c.Records.Get(ctx, key)
}

func (c countedRecords) Put(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	c.n.Add(1)
	return c.Records.Put(ctx, rec, ttl)
}

func (c countedRecords) Delete(ctx context.Context, key string) (bool, error) {
	c.n.Add(1)
	return c.Records.Delete(ctx, key)
}

// countedLocker counts the calls to a memlock.Locker, keyed calls included.
type countedLocker struct {
	*memlock.Locker
	n *atomic.Int64
}

func (c countedLocker) Acquire(ctx context.Context, key string, ttl time.Duration) (lock.Lease, bool, error) {
	c.n.Add(1)
	return c.Locker.Acquire(ctx, key, ttl)
}

func (c countedLocker) Release(ctx context.Context, id string) (lock.Outcome, error) {
	c.n.Add(1)
	return c.Locker.Release(ctx, id)
}

func (c countedLocker) Extend(ctx context.Context, id string, ttl time.Duration) (lock.Outcome, error) {
	c.n.Add(1)
	return c.Locker.Extend(ctx, id, ttl)
}

func (c countedLocker) ReleaseKey(ctx context.Context, key, id string) (lock.Outcome, error) {
	c.n.Add(1)
	return c.Locker.ReleaseKey(ctx, key, id)
}

func (c countedLocker) ExtendKey(ctx context.Context, key, id string, ttl time.Duration) (lock.Outcome, error) {
	c.n.Add(1)
	return c.Locker.ExtendKey(ctx, key, id, ttl)
}

func (c countedLocker) IsLocked(ctx context.Context, key string) (bool, error) {
	c.n.Add(1)
	return c.Locker.IsLocked(ctx, key)
}

func (c countedLocker) LookupKey(ctx context.Context, key string) (lock.Info, bool, error) {
	c.n.Add(1)
	return c.Locker.LookupKey(ctx, key)
}

func (c countedLocker) LookupID(ctx context.Context, id string) (lock.Info, bool, error) {
	c.n.Add(1)
	return c.Locker.LookupID(ctx, id)
}

const maxResponse = 1 << 20

// composeEnv builds Compose(memstore, memlock) with the clock now (nil: the
// process clock).
func composeEnv(t *testing.T, clock *fakeclock.Clock) *storetest.Env {
	var sopts []memstore.Option
	var lopts []memlock.Option
	e := &storetest.Env{Margin: 30 * time.Millisecond}
	if clock != nil {
		sopts = append(sopts, memstore.WithClock(clock.Now))
		lopts = append(lopts, memlock.WithClock(clock.Now))
		e.Advance = clock.Advance
	}
	records := memstore.New(append(sopts, memstore.WithMaxResponseBytes(maxResponse))...)
	locker := memlock.New(lopts...)
	t.Cleanup(func() { _ = records.Close(); _ = locker.Close() })
	var n atomic.Int64
	s, err := middleware.Compose(countedRecords{records, &n}, countedLocker{locker, &n})
	if err != nil {
		t.Fatal(err)
	}
	e.Store = s
	e.Break = func() { _ = records.Close(); _ = locker.Close() }
	e.MaxResponseBytes = maxResponse
	e.RoundTrips = func() int { return int(n.Load()) }
	// Claim: read, lock, read again. Busy: read, lock refused. Complete:
	// extend the lock, put, release. Delete: delete the record, look the
	// lock up.
	e.MaxRoundTrips = storetest.RoundTripLimits{Claim: 3, Busy: 2, TakeOver: 3, Complete: 3, Delete: 2}
	// The claim lives in the lock, which knows no fingerprint.
	e.OpaqueClaims = true
	return e
}

func TestComposeConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env { return composeEnv(t, fakeclock.New()) })
}

func TestComposeConformanceRealClock(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env { return composeEnv(t, nil) })
}

func TestComposeRefusesMissingParts(t *testing.T) {
	records, locker := memstore.New(), memlock.New()
	for name, build := range map[string]func() (store.Store, error){
		"nil records":  func() (store.Store, error) { return middleware.Compose(nil, locker) },
		"nil locker":   func() (store.Store, error) { return middleware.Compose(records, nil) },
		"zero claims":  func() (store.Store, error) { return middleware.Compose(records, locker, middleware.WithMaxClaims(0)) },
		"nil option":   func() (store.Store, error) { return middleware.Compose(records, locker, nil) },
		"fewer claims": func() (store.Store, error) { return middleware.Compose(records, locker, middleware.WithMaxClaims(-1)) },
	} {
		s, err := build()
		if s != nil || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Errorf("%s: Compose = %v, %v; want an InvalidArgument error", name, s, err)
		}
	}
}

// Claims beyond WithMaxClaims are refused without holding the lock, and
// room comes back as claims end.
func TestComposeBoundsItsClaims(t *testing.T) {
	ctx := t.Context()
	locker := memlock.New()
	s, err := middleware.Compose(memstore.New(), locker, middleware.WithMaxClaims(2))
	if err != nil {
		t.Fatal(err)
	}
	a, _, _ := s.Claim(ctx, "a", "fp", time.Minute)
	b, _, _ := s.Claim(ctx, "b", "fp", time.Minute)
	_, claimed, err := s.Claim(ctx, "c", "fp", time.Minute)
	if claimed || idemkit.CodeOf(err) != idemkit.CodeRateLimited {
		t.Fatalf("a third claim = %v, %v; want a RateLimited error", claimed, err)
	}
	if held, _ := locker.IsLocked(ctx, "k:c"); held {
		t.Fatal("a refused claim kept its lock")
	}
	a.State = store.StateCompleted
	if ok, err := s.Complete(ctx, a, time.Hour); !ok || err != nil {
		t.Fatalf("Complete = %v, %v", ok, err)
	}
	if ok, err := s.Release(ctx, b.Key, b.Fence); !ok || err != nil {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	for _, k := range []string{"c", "d"} {
		if _, claimed, err := s.Claim(ctx, k, "fp", time.Minute); !claimed || err != nil {
			t.Fatalf("Claim(%s) after two claims ended = %v, %v", k, claimed, err)
		}
	}
}

// Lock keys are readable where the lock allows them, and hashed otherwise;
// distinct record keys never share a lock.
func TestComposeLockKeys(t *testing.T) {
	ctx := t.Context()
	locker := memlock.New()
	s, err := middleware.Compose(memstore.New(), locker)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Claim(ctx, "idempotency:tenant:order-1", "fp", time.Minute); err != nil {
		t.Fatal(err)
	}
	if held, _ := locker.IsLocked(ctx, "k:idempotency:tenant:order-1"); !held {
		t.Fatal("the lock key of a short, valid record key is not the record key behind k:")
	}
	// A decomposed key is not in NFC: its lock key is hashed, so it does
	// not share the composed spelling's lock.
	for _, k := range []string{"caf\u00e9", "cafe\u0301", "\xff", strings.Repeat("x", 600)} {
		if _, claimed, err := s.Claim(ctx, k, "fp", time.Minute); !claimed || err != nil {
			t.Fatalf("Claim(%q) = %v, %v; each record key has its own lock", k, claimed, err)
		}
	}
}

// The composition's failures are the parts' coded errors.
func TestComposeErrorsAreThePartsErrors(t *testing.T) {
	records := memstore.New()
	_ = records.Close()
	s, _ := middleware.Compose(records, memlock.New())
	_, _, err := s.Claim(t.Context(), "k", "fp", time.Minute)
	if !errors.Is(err, memstore.ErrClosed) || idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable {
		t.Fatalf("Claim on closed records = %v; want ServiceUnavailable wrapping memstore.ErrClosed", err)
	}
}
