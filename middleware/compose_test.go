package middleware_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/lock"
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

// countedLocker counts the calls to a lock.Client, keyed calls included.
type countedLocker struct {
	*lock.Client
	n *atomic.Int64
}

func (c countedLocker) Acquire(ctx context.Context, key string, ttl time.Duration) (lock.Lease, bool, error) {
	c.n.Add(1)
	return c.Client.Acquire(ctx, key, ttl)
}

func (c countedLocker) Release(ctx context.Context, id string) (lock.Status, error) {
	c.n.Add(1)
	return c.Client.Release(ctx, id)
}

func (c countedLocker) Extend(ctx context.Context, id string, ttl time.Duration) (lock.Status, error) {
	c.n.Add(1)
	return c.Client.Extend(ctx, id, ttl)
}

func (c countedLocker) ReleaseKey(ctx context.Context, key, id string) (lock.Status, error) {
	c.n.Add(1)
	return c.Client.ReleaseKey(ctx, key, id)
}

func (c countedLocker) ExtendKey(ctx context.Context, key, id string, ttl time.Duration) (lock.Status, error) {
	c.n.Add(1)
	return c.Client.ExtendKey(ctx, key, id, ttl)
}

func (c countedLocker) IsLocked(ctx context.Context, key string) (bool, error) {
	c.n.Add(1)
	return c.Client.IsLocked(ctx, key)
}

func (c countedLocker) LookupKey(ctx context.Context, key string) (lock.Info, bool, error) {
	c.n.Add(1)
	return c.Client.LookupKey(ctx, key)
}

func (c countedLocker) LookupID(ctx context.Context, id string) (lock.Info, bool, error) {
	c.n.Add(1)
	return c.Client.LookupID(ctx, id)
}

const maxResponse = 1 << 20

// newLocker returns lock.New(s), failing t on an error.
func newLocker(t *testing.T, s store.Store) *lock.Client {
	t.Helper()
	c, err := lock.New(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// composeEnv builds Compose(memstore, lock.New(memstore)) with the clock
// now (nil: the process clock).
func composeEnv(t *testing.T, clock *fakeclock.Clock) *storetest.Env {
	var sopts []memstore.Option
	e := &storetest.Env{Margin: 30 * time.Millisecond}
	if clock != nil {
		sopts = append(sopts, memstore.WithClock(clock.Now))
		e.Advance = clock.Advance
	}
	records := memstore.New(append(sopts, memstore.WithMaxResponseBytes(maxResponse))...)
	locks := memstore.New(sopts...)
	t.Cleanup(func() { _ = records.Close(); _ = locks.Close() })
	var n atomic.Int64
	s, err := middleware.Compose(countedRecords{records, &n}, countedLocker{newLocker(t, locks), &n})
	if err != nil {
		t.Fatal(err)
	}
	e.Store = s
	e.Break = func() { _ = records.Close(); _ = locks.Close() }
	e.MaxResponseBytes = maxResponse
	e.RoundTrips = func() int { return int(n.Load()) }
	// Claim: read, lock, read again. Busy: read, lock refused. Complete:
	// extend the lock, put, release. Delete: delete the record, release
	// this process's lock of the key.
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
	records, locker := memstore.New(), newLocker(t, memstore.New())
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
	locker := newLocker(t, memstore.New())
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
	locker := newLocker(t, memstore.New())
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
	s, _ := middleware.Compose(records, newLocker(t, memstore.New()))
	_, _, err := s.Claim(t.Context(), "k", "fp", time.Minute)
	if !errors.Is(err, memstore.ErrClosed) || idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable {
		t.Fatalf("Claim on closed records = %v; want ServiceUnavailable wrapping memstore.ErrClosed", err)
	}
}

// tinyLocker is a third party's lock provider, written against lock.Locker
// alone: no lock.KeyedLocker, no store.Watcher, no lock.Client inside, and
// no distinction between an expired lease and a lost one. The composition
// works with it as with the lock library.
type tinyLocker struct {
	now func() time.Time

	mu     sync.Mutex
	broken bool
	last   idemkit.Fence
	leases map[string]lock.Lease // by key
}

func (l *tinyLocker) check(ctx context.Context, op string) error {
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return err
	}
	if l.broken {
		return idemkit.NewError(idemkit.CodeServiceUnavailable, op, "the locker is down", nil)
	}
	return nil
}

// live returns the live lease with id, by the locker's clock.
func (l *tinyLocker) live(id string) (lock.Lease, bool) {
	for _, lease := range l.leases {
		if lease.ID == id && l.now().Before(lease.ExpiresAt) {
			return lease, true
		}
	}
	return lock.Lease{}, false
}

func (l *tinyLocker) Acquire(ctx context.Context, key string, ttl time.Duration) (lock.Lease, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.check(ctx, "acquire"); err != nil {
		return lock.Lease{}, false, err
	}
	now := l.now()
	if cur, ok := l.leases[key]; ok && now.Before(cur.ExpiresAt) {
		return lock.Lease{}, false, nil
	}
	l.last = max(l.last+1, idemkit.Fence(now.UnixMilli()))
	lease := lock.Lease{Key: key, ID: rand.Text(), Fence: l.last, AcquiredAt: now, ExpiresAt: now.Add(ttl)}
	l.leases[key] = lease
	return lease, true, nil
}

func (l *tinyLocker) Release(ctx context.Context, id string) (lock.Status, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.check(ctx, "release"); err != nil {
		return lock.Status{}, err
	}
	lease, ok := l.live(id)
	if ok {
		delete(l.leases, lease.Key)
	}
	return lock.Status{OK: ok}, nil
}

func (l *tinyLocker) Extend(ctx context.Context, id string, ttl time.Duration) (lock.Status, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.check(ctx, "extend"); err != nil {
		return lock.Status{}, err
	}
	lease, ok := l.live(id)
	if !ok {
		return lock.Status{}, nil
	}
	lease.ExpiresAt = l.now().Add(ttl)
	l.leases[lease.Key] = lease
	return lock.Status{OK: true, ExpiresAt: lease.ExpiresAt}, nil
}

func (l *tinyLocker) IsLocked(ctx context.Context, key string) (bool, error) {
	_, ok, err := l.LookupKey(ctx, key)
	return ok, err
}

func (l *tinyLocker) LookupKey(ctx context.Context, key string) (lock.Info, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.check(ctx, "lookup-key"); err != nil {
		return lock.Info{}, false, err
	}
	cur, ok := l.leases[key]
	if !ok || !l.now().Before(cur.ExpiresAt) {
		return lock.Info{}, false, nil
	}
	return lock.Info{Fence: cur.Fence, AcquiredAt: cur.AcquiredAt, ExpiresAt: cur.ExpiresAt}, true, nil
}

func (l *tinyLocker) LookupID(ctx context.Context, id string) (lock.Info, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.check(ctx, "lookup-id"); err != nil {
		return lock.Info{}, false, err
	}
	cur, ok := l.live(id)
	return lock.Info{Fence: cur.Fence, AcquiredAt: cur.AcquiredAt, ExpiresAt: cur.ExpiresAt}, ok, nil
}

// TestComposeAnyLocker runs the conformance suite on the composition of
// memstore's records with a third party's minimal lock provider.
func TestComposeAnyLocker(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		clock := fakeclock.New()
		records := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxResponseBytes(maxResponse))
		locker := &tinyLocker{now: clock.Now, leases: make(map[string]lock.Lease)}
		s, err := middleware.Compose(records, locker)
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.Env{
			Store:            s,
			Advance:          clock.Advance,
			MaxResponseBytes: maxResponse,
			OpaqueClaims:     true,
			Break: func() {
				_ = records.Close()
				locker.mu.Lock()
				locker.broken = true
				locker.mu.Unlock()
			},
		}
	})
}
