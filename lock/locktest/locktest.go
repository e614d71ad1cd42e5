package locktest

import (
	"context"
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
)

// Config is what a test asks of the provider the factory builds.
type Config struct {
	// CleanupInIsLocked enables the provider's IsLocked cleanup of long-expired
	// records.
	CleanupInIsLocked bool
	// Logger is where the provider must log (fence-limit warnings). Never nil.
	Logger *slog.Logger
	// Restart is true for the test that calls [Env.Restart]: give it a
	// server it may restart without disturbing other tests.
	Restart bool
}

// Env is one fresh provider, built by a [Factory] for one test, with the
// probes the suite needs to check what the provider stores.
type Env struct {
	// Locker is the provider under test, with no locks held. Required.
	Locker lock.Locker

	// Advance moves the provider's clock forward by d. Set it when the
	// backend's time authority can be injected; the suite then steps across
	// expiry boundaries exactly. Leave it nil for a real clock: the suite
	// then sleeps, with TTLs scaled by Margin.
	Advance func(d time.Duration)

	// Margin is the ε of real-clock tests: the least time by which the suite
	// stays clear of an expiry boundary, which must exceed one round trip to
	// the backend. Default: 50 ms. Unused when Advance is set.
	Margin time.Duration

	// RaiseFence stores a tombstone carrying fence f for key, which no live
	// lease holds, with the expiry a release would give it
	// (provider.KeepUntil(f, time.Time{})), so the next lease for key gets a
	// fence above f. Required (fence-limit tests and fences ahead of the
	// clock).
	RaiseFence func(ctx context.Context, key string, f idemkit.Fence) error

	// Fence reads the fence that key's lock record or tombstone carries, or
	// 0 when the backend holds neither. Required.
	Fence func(ctx context.Context, key string) (idemkit.Fence, error)

	// Stored reports whether a lock record for key is physically kept, live
	// or expired; a tombstone does not count. Required (cleanup tests).
	Stored func(ctx context.Context, key string) (bool, error)

	// ExpiresNatively is true when the backend deletes lock records itself
	// at expiry (Redis PEXPIREAT); the suite then does not expect an
	// expired record to linger until cleanup.
	ExpiresNatively bool

	// Keys returns every key, row or document this Env's backend holds
	// with no expiry. Optional: when set, the suite checks that none is
	// left after a burst of acquires, releases, expiries, cleanups and
	// raised fences: nothing a lock provider writes may live forever.
	Keys func(ctx context.Context) ([]string, error)

	// Break makes the backend unreachable for this Env's Locker (close its
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
// (a fresh locker, key prefix, schema or database): some of the suite's
// keys (".", "a/b", ...) are the same in every test, and it raises fences
// far ahead of the clock.
type Factory func(t *testing.T, cfg Config) *Env

// Run runs the conformance suite against the provider that f builds. Every
// case runs as a subtest, in parallel, each on an Env of its own.
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

// env builds an Env with the default config and fills its defaults.
func (s *suite) env(t *testing.T) *Env { return s.envWith(t, Config{}) }

// ahead is how far the suite raises a fence above the backend's clock to
// check that fences survive where the clock alone would not carry them:
// 10^8 ms, about 28 hours (the tombstones it leaves expire then).
const ahead = idemkit.Fence(100_000_000)

func (s *suite) envWith(t *testing.T, cfg Config) *Env {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e := s.factory(t, cfg)
	if e == nil || e.Locker == nil || e.RaiseFence == nil || e.Fence == nil || e.Stored == nil || e.Break == nil {
		t.Fatal("locktest: the factory returned an Env without Locker, RaiseFence, Fence, Stored or Break")
	}
	if e.Margin <= 0 {
		e.Margin = 50 * time.Millisecond
	}
	return e
}

// fake reports whether the Env's clock is injected.
func (e *Env) fake() bool { return e.Advance != nil }

// pass lets d pass on the provider's clock.
func (e *Env) pass(d time.Duration) {
	if e.fake() {
		e.Advance(d)
		return
	}
	time.Sleep(d)
}

// shortTTL is a TTL for tests that wait for expiry: short on a real clock,
// arbitrary on a fake one.
func (e *Env) shortTTL() time.Duration {
	if e.fake() {
		return 10 * time.Second
	}
	return 4 * e.Margin
}

// expire lets a lease granted no later than granted with ttl run out, with a
// margin: afterwards the backend judges it expired.
func (e *Env) expire(granted time.Time, ttl time.Duration) {
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
func acquire(t *testing.T, e *Env, k string, ttl time.Duration) lock.Lease {
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
func refused(t *testing.T, e *Env, k string) {
	t.Helper()
	_, ok, err := e.Locker.Acquire(t.Context(), k, longTTL)
	if err != nil {
		t.Fatalf("Acquire: unexpected error: %v", err)
	}
	if ok {
		t.Fatal("Acquire succeeded on a held key; want contention (ok = false)")
	}
}

func release(t *testing.T, e *Env, id string) lock.Outcome {
	t.Helper()
	out, err := e.Locker.Release(t.Context(), id)
	if err != nil {
		t.Fatalf("Release: unexpected error: %v", err)
	}
	return out
}

func extend(t *testing.T, e *Env, id string, ttl time.Duration) lock.Outcome {
	t.Helper()
	out, err := e.Locker.Extend(t.Context(), id, ttl)
	if err != nil {
		t.Fatalf("Extend: unexpected error: %v", err)
	}
	return out
}

func isLocked(t *testing.T, e *Env, k string) bool {
	t.Helper()
	locked, err := e.Locker.IsLocked(t.Context(), k)
	if err != nil {
		t.Fatalf("IsLocked: unexpected error: %v", err)
	}
	return locked
}

func lookupKey(t *testing.T, e *Env, k string) (lock.Info, bool) {
	t.Helper()
	info, ok, err := e.Locker.LookupKey(t.Context(), k)
	if err != nil {
		t.Fatalf("LookupKey: unexpected error: %v", err)
	}
	return info, ok
}

func lookupID(t *testing.T, e *Env, id string) (lock.Info, bool) {
	t.Helper()
	info, ok, err := e.Locker.LookupID(t.Context(), id)
	if err != nil {
		t.Fatalf("LookupID: unexpected error: %v", err)
	}
	return info, ok
}

func stored(t *testing.T, e *Env, k string) bool {
	t.Helper()
	ok, err := e.Stored(t.Context(), k)
	if err != nil {
		t.Fatalf("Stored: %v", err)
	}
	return ok
}

func fenceOf(t *testing.T, e *Env, k string) idemkit.Fence {
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

// randomID returns a well-formed lock id that no provider issued.
func randomID() string { return lock.NewID() }

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
