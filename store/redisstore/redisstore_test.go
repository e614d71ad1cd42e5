package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/locktest"
	"github.com/idemkit/idemkit/lock/memlock"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/idemkit/idemkit/lock/redislock/redistest"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
)

func TestNewValidates(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	other := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer other.Close()
	onOther, _ := redislock.New(other)
	otherPrefix, _ := redislock.New(c, redislock.WithKeyPrefix("elsewhere"))
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opts   []redisstore.Option
	}{
		{"nil client", nil, nil},
		{"bad prefix", c, []redisstore.Option{redisstore.WithKeyPrefix("{x}")}},
		{"zero limit", c, []redisstore.Option{redisstore.WithMaxResponseBytes(0)}},
		{"limit past Redis's", c, []redisstore.Option{redisstore.WithMaxResponseBytes(redisstore.DefaultMaxResponseBytes + 1)}},
		{"locker on another client", c, []redisstore.Option{redisstore.WithLocker(onOther)}},
		{"locker with another prefix", c, []redisstore.Option{redisstore.WithLocker(otherPrefix)}},
	} {
		if _, err := redisstore.New(tc.client, tc.opts...); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Errorf("%s: New = %v; want InvalidArgument", tc.name, err)
		}
	}
	if _, err := redisstore.New(c, redisstore.WithMaxResponseBytes(redisstore.DefaultMaxResponseBytes)); err != nil {
		t.Fatalf("New at the default limit: %v", err)
	}
}

func TestCombines(t *testing.T) {
	c1, c2 := redistest.Single(t), redistest.Single(t)
	prefix := testenv.Name(t)
	s, err := redisstore.New(c1, redisstore.WithKeyPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	mk := func(c redis.UniversalClient, opts ...redislock.Option) *redislock.Locker {
		l, err := redislock.New(c, append([]redislock.Option{redislock.WithKeyPrefix(prefix)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	same := mk(c1, redislock.WithLogger(nil), redislock.WithCleanupInIsLocked(true))
	for _, tc := range []struct {
		name string
		l    lock.Locker
		want bool
	}{
		{"same client and prefix", same, true},
		{"another client", mk(c2), false},
		{"another prefix", mk(c1, redislock.WithKeyPrefix("other")), false},
		{"a durability wait the store's locker lacks", mk(c1, redislock.WithWaitForReplicas(1, time.Second)), false},
		{"behind a telemetry decorator", lock.WithTelemetry(same, lock.HookFunc(func(lock.Event) {})), false},
		{"another backend", memlock.New(), false},
	} {
		if got := s.Combines(tc.l); got != tc.want {
			t.Errorf("%s: Combines = %v; want %v", tc.name, got, tc.want)
		}
	}
	waiting := mk(c1, redislock.WithWaitForReplicas(1, time.Second))
	s2, err := redisstore.New(c1, redisstore.WithKeyPrefix(prefix), redisstore.WithLocker(waiting))
	if err != nil {
		t.Fatal(err)
	}
	if !s2.Combines(waiting) || s2.Combines(same) {
		t.Fatal("a store given a locker combines with exactly the lockers that wait as it does")
	}
}

// TestCombinedOperations exercises AcquireGet and PutRelease directly: on
// keys that share a hash tag (one script each) and on keys that do not
// (separate calls), on a single node and a cluster.
func TestCombinedOperations(t *testing.T) {
	for _, b := range redistest.Backends() {
		for _, tc := range []struct {
			name, lockKey, recordKey string
		}{
			{"shared tag", "ns:lock:{k:order-1}", "ns:record:{k:order-1}"},
			{"no shared tag", "lock-order-1", "record-order-1"},
		} {
			t.Run(b.Name+"/"+tc.name, func(t *testing.T) {
				ctx := t.Context()
				c := b.NewClient(t)
				prefix := testenv.Name(t)
				s, err := redisstore.New(c, redisstore.WithKeyPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				l, err := redislock.New(c, redislock.WithKeyPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				lease, ok, _, found, err := s.AcquireGet(ctx, tc.lockKey, time.Minute, tc.recordKey)
				if err != nil || !ok || found || lease.Fence != 1 {
					t.Fatalf("AcquireGet on a free key: %v, %v, %v, %v", lease, ok, found, err)
				}
				if _, ok, _, _, err := s.AcquireGet(ctx, tc.lockKey, time.Minute, tc.recordKey); err != nil || ok {
					t.Fatalf("AcquireGet on a held key: %v, %v; want contention", ok, err)
				}
				rec := store.Record{Key: tc.recordKey, Fingerprint: "fp", State: store.StateCompleted, Response: []byte("r1"), Fence: lease.Fence}
				stored, out, err := s.PutRelease(ctx, rec, time.Minute, lease)
				if err != nil || !stored || !out.OK {
					t.Fatalf("PutRelease: %v, %+v, %v", stored, out, err)
				}
				if locked, _ := l.IsLocked(ctx, tc.lockKey); locked {
					t.Fatal("PutRelease left the lock held")
				}
				lease2, ok, got, found, err := s.AcquireGet(ctx, tc.lockKey, time.Minute, tc.recordKey)
				if err != nil || !ok || !found || string(got.Response) != "r1" || got.Fence != 1 || lease2.Fence != 2 {
					t.Fatalf("AcquireGet over a record: %v, %v, %+v, %v, %v", lease2, ok, got, found, err)
				}
				// A stale holder (lower fence) is refused, and its lease is
				// still released.
				stale := rec
				stale.Fence, stale.Response = 0, []byte("stale")
				stored, out, err = s.PutRelease(ctx, stale, time.Minute, lease2)
				if err != nil || stored || !out.OK {
					t.Fatalf("PutRelease with a lower fence: %v, %+v, %v; want refused and released", stored, out, err)
				}
				if got, _, _ := s.Get(ctx, tc.recordKey); string(got.Response) != "r1" {
					t.Fatalf("the refused put changed the record: %q", got.Response)
				}
				// A foreign lease releases nothing but the put is fenced as usual.
				_, out, err = s.PutRelease(ctx, rec, time.Minute, lock.Lease{Key: tc.lockKey, ID: lock.NewID()})
				if err != nil || out.OK || out.Reason != lock.ReasonNotFound {
					t.Fatalf("PutRelease with a foreign lease: %+v, %v", out, err)
				}
			})
		}
	}
}

func TestCombinedValidation(t *testing.T) {
	s, err := redisstore.New(redistest.Single(t), redisstore.WithKeyPrefix(testenv.Name(t)), redisstore.WithMaxResponseBytes(8))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	rec := store.Record{Key: "r", State: store.StateCompleted, Fence: 1}
	lease := lock.Lease{Key: "l", ID: lock.NewID()}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"AcquireGet empty record key", func() error { _, _, _, _, err := s.AcquireGet(ctx, "l", time.Second, ""); return err }()},
		{"AcquireGet empty lock key", func() error { _, _, _, _, err := s.AcquireGet(ctx, "", time.Second, "r"); return err }()},
		{"AcquireGet zero ttl", func() error { _, _, _, _, err := s.AcquireGet(ctx, "l", 0, "r"); return err }()},
		{"PutRelease bad id", func() error {
			_, _, err := s.PutRelease(ctx, rec, time.Second, lock.Lease{Key: "l", ID: "x"})
			return err
		}()},
		{"PutRelease empty lock key", func() error {
			_, _, err := s.PutRelease(ctx, rec, time.Second, lock.Lease{ID: lease.ID})
			return err
		}()},
		{"PutRelease zero state", func() error {
			_, _, err := s.PutRelease(ctx, store.Record{Key: "r"}, time.Second, lease)
			return err
		}()},
	} {
		if idemkit.CodeOf(tc.err) != idemkit.CodeInvalidArgument {
			t.Errorf("%s: %v; want InvalidArgument", tc.name, tc.err)
		}
	}
	big := rec
	big.Response = []byte(strings.Repeat("x", 9))
	if _, _, err := s.PutRelease(ctx, big, time.Second, lease); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("PutRelease over the limit: %v; want ErrTooLarge", err)
	}
}

// combinedLocker takes locks through the store's combined scripts, so that
// the lock conformance suite runs on them: Acquire is AcquireGet (reading a
// probe record on the lock's slot), ReleaseKey is PutRelease (writing it).
type combinedLocker struct {
	*redislock.Locker
	s *redisstore.Store
}

func (c combinedLocker) probe(key string) string {
	n, err := lock.NormalizeKey(key)
	if err != nil {
		return "probe"
	}
	return "{" + redislock.Tag(n) + "}probe"
}

// Acquire is the store's AcquireGet.
func (c combinedLocker) Acquire(ctx context.Context, key string, ttl time.Duration) (lock.Lease, bool, error) {
	lease, ok, _, _, err := c.s.AcquireGet(ctx, key, ttl, c.probe(key))
	return lease, ok, err
}

// ReleaseKey is the store's PutRelease.
func (c combinedLocker) ReleaseKey(ctx context.Context, key, id string) (lock.Outcome, error) {
	rec := store.Record{Key: c.probe(key), Fingerprint: "probe", State: store.StateCompleted}
	_, out, err := c.s.PutRelease(ctx, rec, time.Minute, lock.Lease{Key: key, ID: id})
	return out, err
}

// TestLockConformanceThroughCombiner runs the lock conformance suite on
// locks taken and released through the store's combined scripts.
func TestLockConformanceThroughCombiner(t *testing.T) {
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			locktest.Run(t, func(t *testing.T, cfg locktest.Config) *locktest.Env {
				c := b.NewClient(t)
				prefix := testenv.Name(t)
				l, err := redislock.New(c, redislock.WithKeyPrefix(prefix), redislock.WithLogger(cfg.Logger),
					redislock.WithCleanupInIsLocked(cfg.CleanupInIsLocked))
				if err != nil {
					t.Fatal(err)
				}
				s, err := redisstore.New(c, redisstore.WithKeyPrefix(prefix), redisstore.WithLocker(l))
				if err != nil {
					t.Fatal(err)
				}
				e := &locktest.Env{Locker: combinedLocker{Locker: l, s: s}, Break: func() { _ = c.Close() }, ExpiresNatively: true}
				redistest.Probes(t, e, l.Layout(), b.NewClient(t))
				return e
			})
		})
	}
}
