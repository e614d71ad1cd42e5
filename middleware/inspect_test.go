package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// TestInspect: what an operator sees of a key's record, in each state;
// the response only when asked for; nothing for an absent key.
func TestInspect(t *testing.T) {
	ctx := t.Context()
	g := newGuard(t, memstore.New(), middleware.WithRecordTTL(time.Hour), middleware.WithLeaseTTL(time.Minute))
	var runs atomic.Int32

	if in, ok, err := g.Inspect(ctx, "tenant", "absent", true); ok || err != nil || !sameInspection(in, middleware.Inspection{}) {
		t.Fatalf("an absent key: %+v, %v, %v; want nothing", in, ok, err)
	}
	if _, ok, err := g.Inspect(ctx, "tenant", "", false); ok || !errors.Is(err, middleware.ErrInvalidKey) {
		t.Fatalf("an empty key: %v, %v; want ErrInvalidKey", ok, err)
	}

	// Completed, unbound.
	out, err := g.Execute(ctx, "done", fpA, value(&runs, `{"id":1}`), middleware.Scope("tenant"))
	if err != nil {
		t.Fatal(err)
	}
	in, ok, err := g.Inspect(ctx, "tenant", "done", false)
	if err != nil || !ok {
		t.Fatalf("Inspect: %v, %v", ok, err)
	}
	want := middleware.Inspection{
		RecordKey: "idempotency:tenant:done", Scope: "tenant", Key: "done", State: store.StateCompleted, Algorithm: "http-v2", Fence: out.Fence,
		CreatedAt: in.CreatedAt, ExpiresAt: in.CreatedAt.Add(time.Hour), Size: len(`{"id":1}`),
	}
	if !sameInspection(in, want) || in.CreatedAt.IsZero() {
		t.Fatalf("a completed record: %+v; want %+v", in, want)
	}
	in, _, _ = g.Inspect(ctx, "tenant", "done", true)
	want.Response = []byte(`{"id":1}`)
	if !sameInspection(in, want) {
		t.Fatalf("with its response: %+v; want %+v", in, want)
	}
	if _, ok, _ := g.Inspect(ctx, "", "done", false); ok {
		t.Fatal("the key without its scope names a record")
	}

	// Completed, bound to credentials, through Do (a JSON fingerprint).
	if _, _, err := middleware.Do(ctx, g, "bound", message{Customer: "c1"}, func(context.Context) (int, error) { return 7, nil },
		middleware.Credentials("Bearer alice"), middleware.RecordTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	in, ok, _ = g.Inspect(ctx, "", "bound", true)
	if !ok || !in.Bound || in.Algorithm != "json-v2" || in.State != store.StateCompleted || string(in.Response) != "7" || in.Size != 1 ||
		in.ExpiresAt.Sub(in.CreatedAt) != time.Minute {
		t.Fatalf("a bound record: %+v", in)
	}

	// A request without a fingerprint.
	if _, _, err := middleware.Do(ctx, g, "no-input", nil, func(context.Context) (string, error) { return "x", nil }); err != nil {
		t.Fatal(err)
	}
	if in, ok, _ = g.Inspect(ctx, "", "no-input", false); !ok || in.Algorithm != "" || in.Bound {
		t.Fatalf("a record without a fingerprint: %+v", in)
	}

	// Not replayable.
	out, err = g.Execute(ctx, "streamed", fpA, func(context.Context) (middleware.Result, error) {
		return middleware.Result{Value: []byte("a stream"), NotReplayable: true}, nil
	}, middleware.Credentials())
	if err != nil {
		t.Fatal(err)
	}
	in, ok, _ = g.Inspect(ctx, "", "streamed", true)
	if !ok || in.State != store.StateNotReplayable || in.Fence != out.Fence || in.Size != 0 || in.Response != nil || !in.Bound || in.Algorithm != "http-v2" {
		t.Fatalf("a not-replayable record: %+v", in)
	}

	// Claimed: read while the work runs.
	var running middleware.Inspection
	var info middleware.CallInfo
	out, err = g.Execute(ctx, "running", fpA, func(ctx context.Context) (middleware.Result, error) {
		info, _ = middleware.CallInfoFrom(ctx)
		var ok bool
		var err error
		if running, ok, err = g.Inspect(ctx, "tenant", "running", true); !ok || err != nil {
			return middleware.Result{}, errors.New("the running claim cannot be inspected")
		}
		return middleware.Result{Value: []byte("v")}, nil
	}, middleware.Scope("tenant"))
	if err != nil {
		t.Fatal(err)
	}
	if running.State != store.StateClaimed || running.Fence != info.Fence || running.Fence != out.Fence || running.Algorithm != "http-v2" ||
		running.ExpiresAt.Sub(running.CreatedAt) != time.Minute || running.Size != 0 || running.Response != nil || running.Sealed {
		t.Fatalf("a running claim: %+v; want claimed under fence %v with a lease of a minute", running, info.Fence)
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times", runs.Load())
	}
}

// sameInspection compares two inspections, their times with Equal and
// their responses by content.
func sameInspection(a, b middleware.Inspection) bool {
	return a.RecordKey == b.RecordKey && a.Scope == b.Scope && a.Key == b.Key && a.State == b.State && a.Algorithm == b.Algorithm && a.Bound == b.Bound &&
		a.Fence == b.Fence && a.CreatedAt.Equal(b.CreatedAt) && a.ExpiresAt.Equal(b.ExpiresAt) && a.Size == b.Size &&
		a.Sealed == b.Sealed && (a.Response == nil) == (b.Response == nil) && bytes.Equal(a.Response, b.Response)
}

// TestForget: Forget deletes a key's outcome and reports whether there
// was one; the next call runs the work again, also for a key recorded not
// replayable; a claim whose outcome could not be recorded is deleted with
// Force.
func TestForget(t *testing.T) {
	ctx := t.Context()
	fs := &faultyStore{Store: memstore.New()}
	g := newGuard(t, fs, fastBackoff, middleware.WithLogger(slog.New(slog.DiscardHandler)), middleware.WithRecordWriteTimeout(5*time.Millisecond), middleware.WithLeaseTTL(time.Hour), middleware.WithWaitBudget(0))
	var runs atomic.Int32

	if ok, err := g.Forget(ctx, "", "absent"); ok || err != nil {
		t.Fatalf("Forget of an absent key: %v, %v", ok, err)
	}
	if _, err := g.Forget(ctx, "", ""); !errors.Is(err, middleware.ErrInvalidKey) {
		t.Fatalf("Forget of an empty key: %v; want ErrInvalidKey", err)
	}

	// Completed.
	first, err := g.Execute(ctx, "k", fpA, value(&runs, "first"), middleware.Scope("s"))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := g.Forget(ctx, "other", "k"); ok || err != nil {
		t.Fatalf("Forget under another scope: %v, %v; want nothing there", ok, err)
	}
	if ok, err := g.Forget(ctx, "s", "k"); !ok || err != nil {
		t.Fatalf("Forget: %v, %v", ok, err)
	}
	if _, ok, _ := g.Inspect(ctx, "s", "k", false); ok {
		t.Fatal("the record is there after Forget")
	}
	if ok, _ := g.Forget(ctx, "s", "k"); ok {
		t.Fatal("a second Forget found a record")
	}
	out, err := g.Execute(ctx, "k", fpB, value(&runs, "second"), middleware.Scope("s"))
	if err != nil || out.Replayed || string(out.Value) != "second" || out.Fence <= first.Fence {
		t.Fatalf("after Forget: %+v, %v; want a fresh execution under a greater fence than %v", out, err, first.Fence)
	}

	// Not replayable: refused until forgotten.
	notReplayable := func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{NotReplayable: true}, nil
	}
	if _, err := g.Execute(ctx, "nr", fpA, notReplayable); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Execute(ctx, "nr", fpA, value(&runs, "x")); !errors.Is(err, middleware.ErrNotReplayable) {
		t.Fatalf("before Forget: %v; want ErrNotReplayable", err)
	}
	if ok, err := g.Forget(ctx, "", "nr"); !ok || err != nil {
		t.Fatalf("Forget: %v, %v", ok, err)
	}
	if out, err := g.Execute(ctx, "nr", fpA, value(&runs, "after")); err != nil || out.Replayed || !out.Recorded {
		t.Fatalf("after Forget: %+v, %v; want a fresh execution", out, err)
	}

	// Not recorded: the claim stays until its lease runs out, or until
	// it is forgotten.
	fs.failCompletes.Store(1 << 30)
	if out, err := g.Execute(ctx, "stuck", fpA, value(&runs, "v")); err != nil || out.Recorded {
		t.Fatalf("a completion that keeps failing: %+v, %v; want not recorded", out, err)
	}
	fs.failCompletes.Store(0)
	if _, err := g.Execute(ctx, "stuck", fpA, value(&runs, "v")); !errors.Is(err, middleware.ErrInProgress) {
		t.Fatalf("before Forget: %v; want in progress", err)
	}
	if in, ok, _ := g.Inspect(ctx, "", "stuck", false); !ok || in.State != store.StateClaimed {
		t.Fatalf("the stuck key: %+v, %v; want claimed", in, ok)
	}
	// Its holder gave up, but nothing tells a live claim's holders apart:
	// it is refused until forced.
	var live *middleware.LiveClaimError
	if ok, err := g.Forget(ctx, "", "stuck"); ok || !errors.As(err, &live) || !errors.Is(err, middleware.ErrInProgress) {
		t.Fatalf("Forget of the stuck claim: %v, %v; want a LiveClaimError", ok, err)
	}
	if ok, err := g.Forget(ctx, "", "stuck", middleware.Force()); !ok || err != nil {
		t.Fatalf("Forget with Force: %v, %v", ok, err)
	}
	if out, err := g.Execute(ctx, "stuck", fpA, value(&runs, "v")); err != nil || !out.Recorded {
		t.Fatalf("after Forget: %+v, %v; want a recorded execution", out, err)
	}
	if runs.Load() != 6 {
		t.Fatalf("fn ran %d times; want 6", runs.Load())
	}
}

// TestForgetLiveClaim: a claim whose work is still running, renewing its
// lease, is not forgotten: Forget deletes nothing and returns a
// LiveClaimError (matching ErrInProgress) with the claim's fence and the
// lease's expiry, and a retry through another guard on the same backend
// is told "in progress" instead of running the work a second time. Force
// deletes the claim: the running work's ctx ends with idemkit.ErrLeaseLost at
// its next renewal, its outcome is not recorded, and the next call runs
// the work again.
func TestForgetLiveClaim(t *testing.T) {
	ctx := t.Context()
	s := memstore.New()
	quiet := middleware.WithLogger(slog.New(slog.DiscardHandler))
	const lease = 300 * time.Millisecond // renewed every 100 ms
	node1 := newGuard(t, s, quiet, middleware.WithLeaseTTL(lease))
	node2 := newGuard(t, s, quiet, middleware.WithLeaseTTL(lease), middleware.WithWaitBudget(0))
	var runs atomic.Int32

	type result struct {
		out   middleware.Outcome
		err   error
		cause error // why the work's ctx ended
		fence idemkit.Fence
	}
	started, release, done := make(chan struct{}), make(chan struct{}), make(chan result, 1)
	defer close(release)
	go func() {
		var r result
		r.out, r.err = node1.Execute(ctx, "pay", fpA, func(ctx context.Context) (middleware.Result, error) {
			runs.Add(1)
			info, _ := middleware.CallInfoFrom(ctx)
			r.fence = info.Fence
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
				r.cause = context.Cause(ctx)
			}
			return middleware.Result{Value: []byte("paid")}, nil
		}, middleware.Scope("tenant"))
		done <- r
	}()
	<-started

	// The holder renews its lease: its expiry moves on.
	first, ok, err := node1.Inspect(ctx, "tenant", "pay", false)
	if err != nil || !ok || first.State != store.StateClaimed {
		t.Fatalf("the running claim: %+v, %v, %v", first, ok, err)
	}
	renewed := first
	for renewed.ExpiresAt.Equal(first.ExpiresAt) {
		time.Sleep(5 * time.Millisecond)
		if renewed, ok, err = node1.Inspect(ctx, "tenant", "pay", false); err != nil || !ok || renewed.State != store.StateClaimed {
			t.Fatalf("the running claim: %+v, %v, %v", renewed, ok, err)
		}
	}

	ok, err = node2.Forget(ctx, "tenant", "pay")
	var live *middleware.LiveClaimError
	if ok || !errors.As(err, &live) || !errors.Is(err, middleware.ErrInProgress) {
		t.Fatalf("Forget of a live claim: %v, %v; want a LiveClaimError matching ErrInProgress", ok, err)
	}
	if live.Fence != first.Fence || live.ExpiresAt.Before(renewed.ExpiresAt) {
		t.Fatalf("the refusal: fence %v, expiry %v; want fence %v and an expiry not before %v", live.Fence, live.ExpiresAt, first.Fence, renewed.ExpiresAt)
	}
	if expiry := live.ExpiresAt.UTC().Format(time.RFC3339Nano); !strings.Contains(err.Error(), expiry) {
		t.Fatalf("the refusal's message %q does not give the expiry %s", err, expiry)
	}
	if in, ok, _ := node1.Inspect(ctx, "tenant", "pay", false); !ok || in.State != store.StateClaimed || in.Fence != first.Fence {
		t.Fatalf("after the refusal: %+v, %v; want the claim still there", in, ok)
	}
	if _, err := node2.Execute(ctx, "pay", fpA, value(&runs, "twice"), middleware.Scope("tenant")); !errors.Is(err, middleware.ErrInProgress) || runs.Load() != 1 {
		t.Fatalf("a retry on the other node: %v, %d runs; want in progress and one run", err, runs.Load())
	}

	if ok, err := node2.Forget(ctx, "tenant", "pay", middleware.Force()); !ok || err != nil {
		t.Fatalf("Forget with Force: %v, %v; want deleted", ok, err)
	}
	if _, ok, _ := node1.Inspect(ctx, "tenant", "pay", false); ok {
		t.Fatal("the claim is there after a forced Forget")
	}
	r := <-done
	if r.err != nil || r.out.Recorded || !errors.Is(r.cause, idemkit.ErrLeaseLost) || r.fence != first.Fence {
		t.Fatalf("the forgotten claim's call: %+v, %v, work's ctx ended by %v; want not recorded, the lease lost", r.out, r.err, r.cause)
	}
	out, err := node2.Execute(ctx, "pay", fpA, value(&runs, "again"), middleware.Scope("tenant"))
	if err != nil || out.Replayed || string(out.Value) != "again" || runs.Load() != 2 || out.Fence <= first.Fence {
		t.Fatalf("after the forced Forget: %+v, %v, %d runs; want a second run under a greater fence", out, err, runs.Load())
	}
}

// TestForgetClaimAfterRead: a key without a record is reported so
// without deleting anything, so that a claim a request makes just after
// Forget read the backend survives it.
func TestForgetClaimAfterRead(t *testing.T) {
	s := &claimAfterRead{Store: memstore.New(), key: "idempotency::k"}
	g := newGuard(t, s)
	if ok, err := g.Forget(t.Context(), "", "k"); ok || err != nil {
		t.Fatalf("Forget: %v, %v; want no record", ok, err)
	}
	if !s.claimed {
		t.Fatal("no claim was made")
	}
	if rec, ok, err := s.Store.Get(t.Context(), s.key); err != nil || !ok || rec.State != store.StateClaimed {
		t.Fatalf("the claim made after the read: %+v, %v, %v; want it still there", rec, ok, err)
	}
}

// claimAfterRead is a store on which a request claims key right after the
// first call that reaches it: after a Get returns, or before a Delete
// runs.
type claimAfterRead struct {
	store.Store
	key     string
	claimed bool
}

func (c *claimAfterRead) claim(ctx context.Context) {
	if !c.claimed {
		_, c.claimed, _ = c.Store.Claim(ctx, c.key, "fp", time.Hour)
	}
}

func (c *claimAfterRead) Get(ctx context.Context, key string) (store.Record, bool, error) {
	defer c.claim(ctx)
	return c.Store.Get(ctx, key)
}

func (c *claimAfterRead) Delete(ctx context.Context, key string) (bool, error) {
	c.claim(ctx)
	return c.Store.Delete(ctx, key)
}

// TestInspectSealed: a record on a sealed store is reported sealed, with
// the size of its envelope; its response is opened when asked for. A guard
// on the store without the seal sees the same record sealed and never gets
// its response; one with another key gets its state, and an error for its
// response.
func TestInspectSealed(t *testing.T) {
	ctx := t.Context()
	current, retired := guardtest.SealKeys()
	inner := memstore.New()
	g := newGuard(t, sealed(t, inner, current))
	const response = `{"card":"4242424242424242"}`
	var runs atomic.Int32
	out, err := g.Execute(ctx, "pay-1", fpA, value(&runs, response), middleware.Credentials("Bearer alice"))
	if err != nil {
		t.Fatal(err)
	}
	size := len(response) + guardtest.SealOverhead(current)
	in, ok, err := g.Inspect(ctx, "", "pay-1", false)
	if err != nil || !ok || !in.Sealed || in.Size != size || in.Response != nil || in.State != store.StateCompleted || !in.Bound || in.Fence != out.Fence {
		t.Fatalf("without its response: %+v, %v, %v; want sealed, %d bytes", in, ok, err, size)
	}
	if in, _, err = g.Inspect(ctx, "", "pay-1", true); err != nil || !in.Sealed || in.Size != size || string(in.Response) != response {
		t.Fatalf("with its response: %+v, %v; want it opened", in, err)
	}

	plain := newGuard(t, inner)
	for _, withResponse := range []bool{false, true} {
		in, ok, err := plain.Inspect(ctx, "", "pay-1", withResponse)
		if err != nil || !ok || !in.Sealed || in.Size != size || in.Response != nil || in.Fence != out.Fence {
			t.Fatalf("through the unsealed store, withResponse %v: %+v, %v, %v; want sealed, no response", withResponse, in, ok, err)
		}
	}

	other := newGuard(t, sealed(t, inner, retired))
	if in, ok, err := other.Inspect(ctx, "", "pay-1", false); err != nil || !ok || !in.Sealed || in.Size != size {
		t.Fatalf("under another key, without its response: %+v, %v, %v", in, ok, err)
	}
	if _, ok, err := other.Inspect(ctx, "", "pay-1", true); ok || !errors.Is(err, store.ErrUnsealable) || idemkit.CodeOf(err) != idemkit.CodeInternal {
		t.Fatalf("under another key, with its response: %v, %v; want ErrUnsealable", ok, err)
	}
	// The way out of a record that no longer opens: forget it.
	if ok, err := other.Forget(ctx, "", "pay-1"); !ok || err != nil {
		t.Fatalf("Forget: %v, %v", ok, err)
	}
	if out, err := other.Execute(ctx, "pay-1", fpA, value(&runs, response), middleware.Credentials("Bearer alice")); err != nil || out.Replayed {
		t.Fatalf("after Forget: %+v, %v; want a fresh execution", out, err)
	}
}

// TestInspectBackendDown: a failing backend is an error, not an absent
// record.
func TestInspectBackendDown(t *testing.T) {
	s := memstore.New()
	g := newGuard(t, s)
	_ = s.Close()
	if _, ok, err := g.Inspect(t.Context(), "", "k", false); ok || !errors.Is(err, idemkit.ErrServiceUnavailable) {
		t.Fatalf("Inspect: %v, %v; want the store's error", ok, err)
	}
	if ok, err := g.Forget(t.Context(), "", "k"); ok || !errors.Is(err, idemkit.ErrServiceUnavailable) {
		t.Fatalf("Forget: %v, %v; want the store's error", ok, err)
	}
}
