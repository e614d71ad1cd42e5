package locktest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/store"
)

// Config is what a test asks of the engine the factory builds.
type Config struct {
	// Restart is true for the test that calls [Env.Restart]: give it a
	// server it may restart without disturbing other tests.
	Restart bool
}

// Env is one fresh engine, built by a [Factory] for one test, with the
// probes the suite needs to check what the engine stores. The suite builds
// its [lock.Client] over Store. The probes take the store key of a lock,
// which is its key normalised to NFC.
type Env struct {
	// Store is the engine under test, holding nothing. Required.
	Store store.Store

	// Advance moves the engine's clock forward by d. Set it when the
	// backend's time authority can be injected; the suite then steps across
	// expiry boundaries exactly. Leave it nil for a real clock: the suite
	// then sleeps, with TTLs scaled by Margin.
	Advance func(d time.Duration)

	// Margin is the ε of real-clock tests: the least time by which the suite
	// stays clear of an expiry boundary, which must exceed one round trip to
	// the backend. Default: 50 ms. Unused when Advance is set.
	Margin time.Duration

	// RaiseFence makes the next claim of key, which no live record holds,
	// get a fence above f, as what is left of a record with fence f would
	// (a tombstone, or the engine's floor). Required (fence-limit tests and
	// fences ahead of the clock).
	RaiseFence func(ctx context.Context, key string, f idemkit.Fence) error

	// SharedFloor declares that RaiseFence raises the floor of every key,
	// because the engine keeps one floor for all its fences (memstore)
	// rather than one per key: the suite then does not check that keys'
	// fences are independent, nor what a released key leaves behind.
	SharedFloor bool

	// Fence reads the fence that key's record (or tombstone) carries, or 0
	// when the backend holds neither. Required.
	Fence func(ctx context.Context, key string) (idemkit.Fence, error)

	// Stored reports whether a record for key is physically kept, live or
	// expired; a tombstone does not count. Required.
	Stored func(ctx context.Context, key string) (bool, error)

	// Keys returns every key, row or document this Env's backend holds
	// with no expiry. Optional: when set, the suite checks that none is
	// left after a burst of acquires, releases, expiries and raised fences:
	// nothing a lock writes may live forever.
	Keys func(ctx context.Context) ([]string, error)

	// Break makes the backend unreachable for this Env's Store (close its
	// client or connection pool), so the suite can check that transport
	// failures surface as coded errors. Required.
	Break func()

	// Restart restarts the backend's server, keeping its data. Set it for
	// durable backends (at least when [Config.Restart] is true); the
	// fence-survives-restart case runs only then.
	Restart func(t *testing.T)
}

// Factory builds a fresh [Env] for one test. It registers its own cleanup
// with t.Cleanup. Each Env must start empty and isolated from every other
// (a fresh store, key prefix, schema or database): some of the suite's
// keys (".", "a/b", ...) are the same in every test, and it raises fences
// far ahead of the clock.
type Factory func(t *testing.T, cfg Config) *Env

// Run runs the conformance suite against the engine that f builds, through
// a [lock.Client] over it. Every case runs as a subtest, in parallel, each
// on an Env of its own.
func Run(t *testing.T, f Factory) {
	t.Helper()
	s := &suite{factory: f}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, s)
		})
	}
}

type suite struct {
	factory Factory
}

type testCase struct {
	name string
	run  func(t *testing.T, s *suite)
}

var cases []testCase

// register adds cases to the suite; each file registers its own.
func register(cs ...testCase) { cases = append(cases, cs...) }

// env is an Env with the Client the suite built over its store.
type env struct {
	*Env
	Locker *lock.Client
}

// env builds an Env with the default config and a Client that logs
// nowhere.
func (s *suite) env(t *testing.T) *env { return s.envWith(t, Config{}, nil) }

// ahead is how far the suite raises a fence above the backend's clock to
// check that fences survive where the clock alone would not carry them:
// 10^8 ms, about 28 hours (the tombstones it leaves expire then).
const ahead = idemkit.Fence(100_000_000)

func (s *suite) envWith(t *testing.T, cfg Config, logger *slog.Logger) *env {
	t.Helper()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e := s.factory(t, cfg)
	if e == nil || e.Store == nil || e.RaiseFence == nil || e.Fence == nil || e.Stored == nil || e.Break == nil {
		t.Fatal("locktest: the factory returned an Env without Store, RaiseFence, Fence, Stored or Break")
	}
	if e.Margin <= 0 {
		e.Margin = 50 * time.Millisecond
	}
	c, err := lock.New(e.Store, lock.WithLogger(logger))
	if err != nil {
		t.Fatalf("lock.New: %v", err)
	}
	return &env{Env: e, Locker: c}
}

// fake reports whether the Env's clock is injected.
func (e *env) fake() bool { return e.Advance != nil }

// pass lets d pass on the provider's clock.
func (e *env) pass(d time.Duration) {
	if e.fake() {
		e.Advance(d)
		return
	}
	time.Sleep(d)
}

// shortTTL is a TTL for tests that wait for expiry: short on a real clock,
// arbitrary on a fake one.
func (e *env) shortTTL() time.Duration {
	if e.fake() {
		return 10 * time.Second
	}
	return 4 * e.Margin
}

// expire lets a lease granted no later than granted with ttl run out, with a
// margin: afterwards the backend judges it expired.
func (e *env) expire(granted time.Time, ttl time.Duration) {
	if e.fake() {
		e.Advance(ttl)
		return
	}
	time.Sleep(time.Until(granted.Add(ttl + e.Margin)))
}

// longTTL is a TTL that never runs out during a test.
const longTTL = time.Minute

// key returns a key unique to the test, so that providers sharing a server
// never see each other's keys. It contains "/" on purpose.
func key(t *testing.T, suffix string) string {
	return fmt.Sprintf("locktest/%s/%s", t.Name(), suffix)
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{22}$`)

// acquire takes the lock on k and fails the test unless it gets it.
func acquire(t *testing.T, e *env, k string, ttl time.Duration) lock.Lease {
	t.Helper()
	lease, ok, err := e.Locker.Acquire(t.Context(), k, ttl)
	if err != nil {
		t.Fatalf("Acquire: unexpected error: %v", err)
	}
	if !ok {
		t.Fatal("Acquire: the key was locked; want it free")
	}
	return lease
}

// refused asserts that acquiring k is refused as contention.
func refused(t *testing.T, e *env, k string) {
	t.Helper()
	_, ok, err := e.Locker.Acquire(t.Context(), k, longTTL)
	if err != nil {
		t.Fatalf("Acquire: unexpected error: %v", err)
	}
	if ok {
		t.Fatal("Acquire succeeded on a held key; want contention (ok = false)")
	}
}

func release(t *testing.T, e *env, id string) lock.Status {
	t.Helper()
	out, err := e.Locker.Release(t.Context(), id)
	if err != nil {
		t.Fatalf("Release: unexpected error: %v", err)
	}
	return out
}

func extend(t *testing.T, e *env, id string, ttl time.Duration) lock.Status {
	t.Helper()
	out, err := e.Locker.Extend(t.Context(), id, ttl)
	if err != nil {
		t.Fatalf("Extend: unexpected error: %v", err)
	}
	return out
}

func isLocked(t *testing.T, e *env, k string) bool {
	t.Helper()
	locked, err := e.Locker.IsLocked(t.Context(), k)
	if err != nil {
		t.Fatalf("IsLocked: unexpected error: %v", err)
	}
	return locked
}

func lookupKey(t *testing.T, e *env, k string) (lock.Info, bool) {
	t.Helper()
	info, ok, err := e.Locker.LookupKey(t.Context(), k)
	if err != nil {
		t.Fatalf("LookupKey: unexpected error: %v", err)
	}
	return info, ok
}

func lookupID(t *testing.T, e *env, id string) (lock.Info, bool) {
	t.Helper()
	info, ok, err := e.Locker.LookupID(t.Context(), id)
	if err != nil {
		t.Fatalf("LookupID: unexpected error: %v", err)
	}
	return info, ok
}

func stored(t *testing.T, e *env, k string) bool {
	t.Helper()
	ok, err := e.Stored(t.Context(), k)
	if err != nil {
		t.Fatalf("Stored: %v", err)
	}
	return ok
}

func fenceOf(t *testing.T, e *env, k string) idemkit.Fence {
	t.Helper()
	f, err := e.Fence(t.Context(), k)
	if err != nil {
		t.Fatalf("Fence: %v", err)
	}
	return f
}

// wantCode asserts that err is a *idemkit.Error with the given code that also
// matches the code's sentinel.
func wantCode(t *testing.T, what string, err error, code idemkit.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error; want %v", what, code)
	}
	var le *idemkit.Error
	if !errors.As(err, &le) {
		t.Fatalf("%s: error %v (%T) is not a *idemkit.Error", what, err, err)
	}
	if le.Code != code {
		t.Fatalf("%s: code %v (%v); want %v", what, le.Code, err, code)
	}
	if !errors.Is(err, code.Sentinel()) {
		t.Fatalf("%s: errors.Is(err, %v sentinel) is false", what, code)
	}
}

// randomID returns a well-formed lock id that nobody issued.
func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// sameInfo asserts that two lookups describe the same lock unchanged.
func sameInfo(t *testing.T, what string, a, b lock.Info) {
	t.Helper()
	if a.KeyHash != b.KeyHash || a.IDHash != b.IDHash || a.Fence != b.Fence ||
		!a.AcquiredAt.Equal(b.AcquiredAt) || !a.ExpiresAt.Equal(b.ExpiresAt) {
		t.Fatalf("%s: lock changed: before %v, after %v", what, a, b)
	}
}

// logBuffer captures a provider's log output as text.
type logBuffer struct {
	mu    sync.Mutex
	buf   strings.Builder
	lines int
}

// Write appends p and counts its lines.
func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines += strings.Count(string(p), "\n")
	return b.buf.Write(p)
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (b *logBuffer) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lines
}

// String returns everything logged so far.
func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
