package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// Env is one fresh [store.Store], built by a [Factory] for one test.
type Env struct {
	// Store is the store under test, empty. Required.
	Store store.Store

	// Advance moves the store's clock forward by d. Set it when the clock
	// can be injected; leave it nil for a real clock, and the suite sleeps
	// with TTLs scaled by Margin.
	Advance func(d time.Duration)

	// Margin is the ε of real-clock tests: more than one round trip to the
	// backend. Default: 50 ms. Unused when Advance is set.
	Margin time.Duration

	// Break makes the backend unreachable for this Env's Store (close its
	// client), so the suite can check that transport failures surface as
	// coded errors. Required.
	Break func()

	// Stall freezes the backend's server (SIGSTOP) and returns the function
	// that resumes it. Optional: when set, the suite checks that every
	// operation on a stalled server ends with a coded error by its ctx
	// deadline instead of hanging, and that the store works again once the
	// server is back.
	Stall func() (resume func())

	// MaxResponseBytes is the largest response the store holds, if it has a
	// limit (0: none within the suite's sizes). The suite then checks that
	// a larger one is refused with store.ErrTooLarge before any write.
	MaxResponseBytes int

	// RoundTrips returns the number of round trips (commands, statements,
	// RPCs) the store has made to its backend so far. Optional: when set,
	// the suite checks each operation's cost against MaxRoundTrips.
	RoundTrips func() int

	// MaxRoundTrips declares what each operation may cost when RoundTrips
	// is set; a zero field takes its default.
	MaxRoundTrips RoundTripLimits

	// Keys returns every key, row or document the backend holds with no
	// expiry. Optional: when set, the suite checks that none is left after
	// a burst of claims, completions, releases and deletions: nothing a
	// store writes may live forever.
	Keys func(ctx context.Context) ([]string, error)

	// OpaqueClaims declares that a busy Claim and a Get of a live claim
	// return a record whose State is StateClaimed but whose Fingerprint,
	// Fence and ExpiresAt may be empty, because the store does not keep
	// them where it can read them (the composition of a record store with
	// a lock: the claim lives in the lock, which knows no fingerprint).
	// Leave it false for a store that keeps its claims in its records: the
	// suite then checks those fields.
	OpaqueClaims bool

	// ShiftClock moves the backend's clock by d from where it is (d < 0:
	// back), at once and for every connection, as a clock step or a
	// failover to a node whose clock is behind does; the suite moves it
	// back when the case ends. Optional, but every durable engine's test
	// sets it, on a server of the Env's own (see [RunClock]): the suite then
	// checks that fences keep growing when the clock steps back.
	ShiftClock func(t *testing.T, d time.Duration)

	// Sweep removes what the store's sweeper would remove now, for a store
	// that keeps ended records until a sweep. Optional: the clock case runs
	// it just before the clock steps back, where a sweeper removes most.
	Sweep func(ctx context.Context) error
}

// RoundTripLimits are the most round trips each operation may cost. A zero
// field takes its default: 1 for every operation, 3 for a take-over.
type RoundTripLimits struct {
	Claim    int // a Claim that takes a free key
	Busy     int // a Claim refused because a live claim holds the key
	Replay   int // a Claim that returns an outcome
	TakeOver int // a Claim that replaces a claim whose lease ran out (default 3)
	Extend   int
	Complete int
	Release  int
	Get      int
	Delete   int
}

// Factory builds a fresh, empty [Env] for one test, isolated from every
// other (its own store, key prefix, table or collection), and registers its
// cleanup with t.Cleanup.
type Factory func(t *testing.T) *Env

// Run runs the conformance suite of [store.Store] against the stores f
// builds: claims on free, busy and run-out keys, completion and replay,
// not-replayable outcomes with a response, what a take-over reports it
// replaced (required of a store with Advance that keeps its claims in its
// records; checked when reported by any other),
// leases and record expiry at their boundaries, stale holders, releases,
// fences that only grow (across expiry, deletion and release), races on one
// key, large responses, keys of any bytes, argument validation before I/O,
// ended contexts, transport failures and, when the Env allows, stalled
// servers, round trips per operation, state without an expiry and steps
// back of the backend's clock. Each case runs in parallel on its own Env.
func Run(t *testing.T, f Factory) {
	t.Helper()
	for _, c := range storeCases {
		runCase(t, f, c.name, c.run)
	}
}

// runCase runs one case, in parallel, on an Env of its own.
func runCase(t *testing.T, f Factory, name string, run func(t *testing.T, e *Env)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		e := f(t)
		if e == nil || e.Store == nil || e.Break == nil {
			t.Fatal("storetest: the factory returned an Env without Store or Break")
		}
		if e.Margin <= 0 {
			e.Margin = 50 * time.Millisecond
		}
		run(t, e)
	})
}

// longTTL is a lease or record TTL no case outlives.
const longTTL = time.Hour

// fp is the fingerprint the suite claims with; otherFP is another
// request's.
const (
	fp      = "test-v1:abababababababababababababababababababababababababababababababab"
	otherFP = "test-v1:cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
)

func key(t *testing.T, suffix string) string {
	return fmt.Sprintf("storetest/%s/%s", t.Name(), suffix)
}

// anyKeys are record keys of every awkward kind: separators, dots, NUL,
// invalid UTF-8, engine syntax, spellings that normalise alike, and the
// longest keys (including two that differ only in their last byte, and
// multi-byte keys across the length limits engines and locks have).
func anyKeys(t *testing.T) []string {
	long := strings.Repeat("\xff\x00\u00e9", store.MaxKeyBytes/4-1) // 1020 bytes
	return []string{
		"/", "a/b", "a/b/c", ".", "..", "__x__", "\x00", "a\x00b", "\xff\xfe", "k:" + t.Name(), "h:" + t.Name(),
		"{tag}", "fence:x", "id:x", "caf\u00e9", "cafe\u0301", "\U0001F512", " ", strings.Repeat("k", store.MaxKeyBytes),
		strings.Repeat("k", store.MaxKeyBytes-1) + "j", long + "abcd", long + "abce",
		strings.Repeat("\u00e9", 256), strings.Repeat("e\u0301", 171), "%s\n\t\r", "*", "?", "[x]", "'", "\"", "\\",
	}
}

// decomposedIndex and composedIndex are where anyKeys has "cafe\u0301" and "caf\u00e9".
const (
	composedIndex   = 14
	decomposedIndex = 15
)

func wantCode(t *testing.T, what string, err error, code idemkit.Code) {
	t.Helper()
	var le *idemkit.Error
	if !errors.As(err, &le) || le.Code != code || !errors.Is(err, code.Sentinel()) {
		t.Fatalf("%s: error %v; want a *idemkit.Error with code %v", what, err, code)
	}
}

// wantUnavailable fails unless err is a ServiceUnavailable or
// NetworkTimeout error that does not repeat secret.
func wantUnavailable(t *testing.T, what string, err error, secret string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s on an unreachable backend: no error", what)
	}
	var le *idemkit.Error
	if !errors.As(err, &le) {
		t.Fatalf("%s on an unreachable backend: %v is not a *idemkit.Error", what, err)
	}
	if c := idemkit.CodeOf(err); c != idemkit.CodeServiceUnavailable && c != idemkit.CodeNetworkTimeout {
		t.Fatalf("%s on an unreachable backend: code %v (%v); want ServiceUnavailable or NetworkTimeout", what, c, err)
	}
	if secret != "" && strings.Contains(err.Error(), secret) {
		t.Fatalf("%s: the error message contains the raw key: %v", what, err)
	}
}

// near reports whether a and b are within tolerance of each other.
func near(a, b time.Time, tolerance time.Duration) bool {
	return within(a.Sub(b), 0, tolerance)
}

// within reports whether d is within tolerance of want.
func within(d, want, tolerance time.Duration) bool {
	return want-tolerance <= d && d <= want+tolerance
}

// pass lets d go by on the store's clock: the injected clock moves, or the
// suite sleeps d plus the margin.
func pass(e *Env, d time.Duration) {
	if e.Advance != nil {
		e.Advance(d)
		return
	}
	time.Sleep(d + e.Margin)
}

// shortTTL is a TTL the suite lets run out: 10 s on an injected clock, a
// few margins on a real one.
func shortTTL(e *Env) time.Duration {
	if e.Advance != nil {
		return 10 * time.Second
	}
	return 4 * e.Margin
}

// The operations, failing the test on an error.

func claim(t *testing.T, e *Env, k, fp string, ttl time.Duration) (store.Record, bool) {
	t.Helper()
	rec, claimed, err := e.Store.Claim(t.Context(), k, fp, ttl)
	if err != nil {
		t.Fatalf("Claim: unexpected error: %v", err)
	}
	if rec.Key != k {
		t.Fatalf("Claim returned a record under another key (%d bytes; want %d)", len(rec.Key), len(k))
	}
	if claimed && (rec.State != store.StateClaimed || rec.Fence == 0) {
		t.Fatalf("Claim reported claimed = true with %+v; want State claimed and a fence", rec)
	}
	if !rec.State.Valid() {
		t.Fatalf("Claim returned a record with state %v", rec.State)
	}
	return rec, claimed
}

// mustClaim claims k and fails unless it was free.
func mustClaim(t *testing.T, e *Env, k string, ttl time.Duration) store.Record {
	t.Helper()
	rec, claimed := claim(t, e, k, fp, ttl)
	if !claimed {
		t.Fatalf("Claim of a free key was refused: %+v", rec)
	}
	return rec
}

func complete(t *testing.T, e *Env, rec store.Record, ttl time.Duration) bool {
	t.Helper()
	ok, err := e.Store.Complete(t.Context(), rec, ttl)
	if err != nil {
		t.Fatalf("Complete: unexpected error: %v", err)
	}
	return ok
}

func extend(t *testing.T, e *Env, k string, f idemkit.Fence, ttl time.Duration) bool {
	t.Helper()
	_, ok, err := e.Store.Extend(t.Context(), k, f, ttl)
	if err != nil {
		t.Fatalf("Extend: unexpected error: %v", err)
	}
	return ok
}

func release(t *testing.T, e *Env, k string, f idemkit.Fence) bool {
	t.Helper()
	ok, err := e.Store.Release(t.Context(), k, f)
	if err != nil {
		t.Fatalf("Release: unexpected error: %v", err)
	}
	return ok
}

func get(t *testing.T, e *Env, k string) (store.Record, bool) {
	t.Helper()
	r, ok, err := e.Store.Get(t.Context(), k)
	if err != nil {
		t.Fatalf("Get: unexpected error: %v", err)
	}
	if ok && r.Key != k {
		t.Fatalf("Get returned the record of another key")
	}
	if ok && !r.State.Valid() {
		t.Fatalf("Get returned a record with state %v", r.State)
	}
	return r, ok
}

func del(t *testing.T, e *Env, k string) bool {
	t.Helper()
	ok, err := e.Store.Delete(t.Context(), k)
	if err != nil {
		t.Fatalf("Delete: unexpected error: %v", err)
	}
	return ok
}

// outcome is the completion of claim c with response body.
func outcome(c store.Record, body string) store.Record {
	c.State, c.Response = store.StateCompleted, []byte(body)
	return c
}

// wantFresh fails unless rec is the new claim a Claim with ttl just
// returned: fingerprint fp, a fence, and a lease of ttl by the store's
// clock (CreatedAt to ExpiresAt; on a real clock also near the suite's
// clock).
func wantFresh(t *testing.T, e *Env, rec store.Record, fp string, ttl time.Duration, before time.Time) {
	t.Helper()
	if rec.State != store.StateClaimed || rec.Fingerprint != fp || rec.Fence == 0 || len(rec.Response) != 0 {
		t.Fatalf("new claim %+v; want State claimed, the claim's fingerprint, a fence and no response", rec)
	}
	if !within(rec.ExpiresAt.Sub(rec.CreatedAt), ttl, time.Millisecond) {
		t.Fatalf("new claim: ExpiresAt − CreatedAt = %v; want the lease TTL %v", rec.ExpiresAt.Sub(rec.CreatedAt), ttl)
	}
	if e.Advance == nil && (rec.ExpiresAt.Before(before.Add(ttl-time.Second)) || rec.ExpiresAt.After(time.Now().Add(ttl+time.Second))) {
		t.Fatalf("new claim expires at %v; want about now + %v", rec.ExpiresAt, ttl)
	}
}

// wantSameClaim fails unless got is the live claim want (by the store's
// reading of it: opaque claims are only checked for their state).
func wantSameClaim(t *testing.T, e *Env, what string, got, want store.Record) {
	t.Helper()
	if got.State != store.StateClaimed || got.Key != want.Key || len(got.Response) != 0 {
		t.Fatalf("%s: %+v; want the live claim", what, got)
	}
	if e.OpaqueClaims {
		return
	}
	if got.Fingerprint != want.Fingerprint || got.Fence != want.Fence || !near(got.ExpiresAt, want.ExpiresAt, time.Millisecond) {
		t.Fatalf("%s: %+v; want the live claim %+v (its fingerprint, fence and lease)", what, got, want)
	}
}

// wantOutcome fails unless got is the outcome out, written by the claim
// with out's fence, for ttl.
func wantOutcome(t *testing.T, what string, got, out store.Record, ttl time.Duration) {
	t.Helper()
	if got.Key != out.Key || got.State != out.State || got.Fingerprint != out.Fingerprint || got.Fence != out.Fence || string(got.Response) != string(out.Response) {
		t.Fatalf("%s: %+v; want the outcome %+v", what, got, out)
	}
	if !within(got.ExpiresAt.Sub(got.CreatedAt), ttl, time.Millisecond) {
		t.Fatalf("%s: ExpiresAt − CreatedAt = %v; want the record TTL %v", what, got.ExpiresAt.Sub(got.CreatedAt), ttl)
	}
}

// wantHeld fails unless the claim c still holds its key: a duplicate is
// busy, and (for stores that expose their claims) Get shows c unchanged.
func wantHeld(t *testing.T, e *Env, what string, c store.Record) {
	t.Helper()
	got, ok := get(t, e, c.Key)
	if !ok {
		t.Fatalf("%s: the claim is gone", what)
	}
	wantSameClaim(t, e, what+" (Get)", got, c)
	dup, claimed := claim(t, e, c.Key, otherFP, longTTL)
	if claimed {
		t.Fatalf("%s: a duplicate claimed the key (fence %v)", what, dup.Fence)
	}
	wantSameClaim(t, e, what+" (a duplicate's Claim)", dup, c)
}
