package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// TestScopedRecordKeys: a scoped key's record is
// "<namespace>:<escaped scope>:<key>", and no two (scope, key) pairs share
// a record, however their ':' and '%' are placed: each pair executes once
// and replays its own response.
func TestScopedRecordKeys(t *testing.T) {
	g := newGuard(t, memstore.New())
	pairs := []struct{ scope, key, recordKey string }{
		{"", "k", "idempotency::k"},
		{"a", "b:c", "idempotency:a:b:c"},
		{"a:b", "c", "idempotency:a%3Ab:c"},
		{"a%3Ab", "c", "idempotency:a%253Ab:c"},
		{"a%", "c", "idempotency:a%25:c"},
		{"a", "%3Ab:c", "idempotency:a:%3Ab:c"},
		{"", "a:c", "idempotency::a:c"},
		{":", "c", "idempotency:%3A:c"},
		{"", ":c", "idempotency:::c"},
		{"%3A", "c", "idempotency:%253A:c"},
		{"%", "3A:c", "idempotency:%25:3A:c"},
		{"a:", ":c", "idempotency:a%3A::c"},
		{"a::", "c", "idempotency:a%3A%3A:c"},
		{"tenant-7", "k", "idempotency:tenant-7:k"},
	}
	var runs atomic.Int32
	seen := map[string]bool{}
	for i, p := range pairs {
		out, err := g.Execute(t.Context(), p.key, fpA, value(&runs, fmt.Sprint(i)), middleware.Scope(p.scope))
		if err != nil || out.Replayed || !out.Recorded {
			t.Fatalf("scope %q, key %q: %+v, %v; want a fresh execution", p.scope, p.key, out, err)
		}
		in, ok, err := g.Inspect(t.Context(), p.scope, p.key, false)
		if err != nil || !ok || in.RecordKey != p.recordKey {
			t.Fatalf("scope %q, key %q: record %q (%v, %v); want %q", p.scope, p.key, in.RecordKey, ok, err, p.recordKey)
		}
		if seen[in.RecordKey] {
			t.Fatalf("scope %q, key %q: record %q shared with another pair", p.scope, p.key, in.RecordKey)
		}
		seen[in.RecordKey] = true
	}
	if int(runs.Load()) != len(pairs) {
		t.Fatalf("fn ran %d times for %d pairs", runs.Load(), len(pairs))
	}
	for i, p := range pairs {
		out, err := g.Execute(t.Context(), p.key, fpA, value(&runs, "again"), middleware.Scope(p.scope))
		if err != nil || !out.Replayed || string(out.Value) != fmt.Sprint(i) {
			t.Fatalf("scope %q, key %q: %+v, %v; want its own response %d replayed", p.scope, p.key, out, err, i)
		}
	}
	if int(runs.Load()) != len(pairs) {
		t.Fatalf("fn ran %d times after the replays", runs.Load())
	}
}

// TestScopedKeyLength: the namespace, the escaped scope, two separators
// and the key must fit in store.MaxKeyBytes; Execute, Inspect and Forget
// refuse a longer one alike.
func TestScopedKeyLength(t *testing.T) {
	g := newGuard(t, memstore.New())
	var runs atomic.Int32
	for _, c := range []struct {
		scope   string
		escaped int // the scope's length once escaped
	}{{"", 0}, {"tenant", 6}, {"a:b%", 8}} {
		room := store.MaxKeyBytes - len("idempotency") - 2 - c.escaped
		fits, over := strings.Repeat("k", room), strings.Repeat("k", room+1)
		out, err := g.Execute(t.Context(), fits, fpA, value(&runs, "v"), middleware.Scope(c.scope))
		if err != nil || !out.Recorded {
			t.Fatalf("scope %q, key of %d bytes: %+v, %v; want it to fit", c.scope, len(fits), out, err)
		}
		if in, ok, err := g.Inspect(t.Context(), c.scope, fits, false); err != nil || !ok || len(in.RecordKey) != store.MaxKeyBytes {
			t.Fatalf("scope %q: Inspect %q (%v, %v); want a record key of %d bytes", c.scope, in.RecordKey, ok, err, store.MaxKeyBytes)
		}
		before := runs.Load()
		if _, err := g.Execute(t.Context(), over, fpA, value(&runs, "v"), middleware.Scope(c.scope)); !errors.Is(err, middleware.ErrInvalidKey) {
			t.Fatalf("scope %q, key of %d bytes: %v; want ErrInvalidKey", c.scope, len(over), err)
		}
		if _, _, err := g.Inspect(t.Context(), c.scope, over, false); !errors.Is(err, middleware.ErrInvalidKey) {
			t.Fatalf("scope %q: Inspect of a key too long: %v; want ErrInvalidKey", c.scope, err)
		}
		if _, err := g.Forget(t.Context(), c.scope, over); !errors.Is(err, middleware.ErrInvalidKey) {
			t.Fatalf("scope %q: Forget of a key too long: %v; want ErrInvalidKey", c.scope, err)
		}
		if runs.Load() != before {
			t.Fatalf("scope %q: fn ran for a key too long", c.scope)
		}
	}
}

// callInfos collects what the work reads from its ctx.
type callInfos struct {
	direct, derived, afterDone middleware.CallInfo
	ok                         [3]bool
}

func readCallInfo(ctx context.Context) callInfos {
	var c callInfos
	c.direct, c.ok[0] = middleware.CallInfoFrom(ctx)
	d, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c.derived, c.ok[1] = middleware.CallInfoFrom(d)
	_ = ctx.Done() // fn's ctx now has a context of its own inside
	c.afterDone, c.ok[2] = middleware.CallInfoFrom(ctx)
	return c
}

func (c callInfos) check(t *testing.T, what string, want middleware.CallInfo) {
	t.Helper()
	for i, got := range []middleware.CallInfo{c.direct, c.derived, c.afterDone} {
		if !c.ok[i] || got != want {
			t.Fatalf("%s, read %d: %+v (%v); want %+v", what, i, got, c.ok[i], want)
		}
	}
}

// TestCallInfoFrom: the work reads its operation, scope, key and fence
// from its ctx (Execute and Do), also through a derived ctx and after its
// ctx made a context of its own; the fence is the outcome's. Outside a
// call there is none.
func TestCallInfoFrom(t *testing.T) {
	if _, ok := middleware.CallInfoFrom(t.Context()); ok {
		t.Fatal("CallInfoFrom outside a call reported one")
	}
	g := newGuard(t, memstore.New())
	var infos callInfos
	out, err := g.Execute(t.Context(), "order-1", fpA, func(ctx context.Context) (middleware.Result, error) {
		infos = readCallInfo(ctx)
		return middleware.Result{Value: []byte("ok")}, nil
	}, middleware.Scope("tenant:7"), middleware.Operation("POST /orders"))
	if err != nil || out.Fence == 0 {
		t.Fatalf("Execute: %+v, %v", out, err)
	}
	infos.check(t, "Execute", middleware.CallInfo{Operation: "POST /orders", Scope: "tenant:7", Key: "order-1", Fence: out.Fence})

	ctx, outcome := middleware.WatchOutcome(t.Context())
	_, _, err = middleware.Do(ctx, g, "msg-1", message{Customer: "c1"}, func(ctx context.Context) (int, error) {
		infos = readCallInfo(ctx)
		return 1, nil
	}, middleware.Scope("queue"), middleware.Operation("charges"))
	e, ok := outcome()
	if err != nil || !ok || e.Kind != middleware.EventExecuted || e.Fence == 0 {
		t.Fatalf("Do: %v, outcome %+v (%v)", err, e, ok)
	}
	infos.check(t, "Do", middleware.CallInfo{Operation: "charges", Scope: "queue", Key: "msg-1", Fence: e.Fence})
	if in, _, _ := g.Inspect(t.Context(), "queue", "msg-1", false); in.Fence != e.Fence {
		t.Fatalf("the record's fence %v; want the one the work read, %v", in.Fence, e.Fence)
	}
}

// TestNestedCallInfo: a Do inside the work of another call sees its own
// call, and the outer work sees its own again afterwards; DoNotRecord in
// the inner work leaves the outer outcome recorded.
func TestNestedCallInfo(t *testing.T) {
	g := newGuard(t, memstore.New())
	var inner, outerAfter middleware.CallInfo
	var innerRuns atomic.Int32
	innerFn := func(ctx context.Context) (string, error) {
		innerRuns.Add(1)
		inner, _ = middleware.CallInfoFrom(ctx)
		middleware.DoNotRecord(ctx)
		return "inner", nil
	}
	out, err := g.Execute(t.Context(), "outer-key", fpA, func(ctx context.Context) (middleware.Result, error) {
		v, replayed, err := middleware.Do(ctx, g, "inner-key", nil, innerFn, middleware.Scope("inner-scope"), middleware.Operation("inner-op"))
		if err != nil || replayed || v != "inner" {
			return middleware.Result{}, fmt.Errorf("inner Do: %q, %v, %v", v, replayed, err)
		}
		outerAfter, _ = middleware.CallInfoFrom(ctx)
		return middleware.Result{Value: []byte("outer")}, nil
	}, middleware.Scope("outer-scope"), middleware.Operation("outer-op"))
	if err != nil || !out.Recorded {
		t.Fatalf("outer: %+v, %v", out, err)
	}
	if inner.Key != "inner-key" || inner.Scope != "inner-scope" || inner.Operation != "inner-op" || inner.Fence == 0 {
		t.Fatalf("the inner work read %+v; want its own call", inner)
	}
	if want := (middleware.CallInfo{Operation: "outer-op", Scope: "outer-scope", Key: "outer-key", Fence: out.Fence}); outerAfter != want {
		t.Fatalf("the outer work read %+v after the inner call; want %+v", outerAfter, want)
	}
	if _, ok, _ := g.Inspect(t.Context(), "inner-scope", "inner-key", false); ok {
		t.Fatal("the inner call asked not to be recorded, but its record is there")
	}
	if in, ok, _ := g.Inspect(t.Context(), "outer-scope", "outer-key", false); !ok || in.State != store.StateCompleted {
		t.Fatalf("the outer record: %+v, %v; want it completed", in, ok)
	}
	if _, _, err := middleware.Do(t.Context(), g, "inner-key", nil, innerFn, middleware.Scope("inner-scope")); err != nil || innerRuns.Load() != 2 {
		t.Fatalf("a retry of the inner call: %v, runs %d; want it to run again", err, innerRuns.Load())
	}
}

// TestDoNotRecord: the work's outcome is not stored and its claim is
// released, so the next call runs it again at once; outside a call
// DoNotRecord reports false.
func TestDoNotRecord(t *testing.T) {
	if middleware.DoNotRecord(t.Context()) {
		t.Fatal("DoNotRecord outside a call reported true")
	}
	var ev events
	g := newGuard(t, memstore.New(), middleware.WithHook(&ev))
	var runs atomic.Int32
	fn := func(ctx context.Context) (middleware.Result, error) {
		runs.Add(1)
		if !middleware.DoNotRecord(ctx) {
			t.Error("DoNotRecord inside the work reported false")
		}
		return middleware.Result{Value: []byte("wrong one-time password")}, nil
	}
	for i := 1; i <= 2; i++ {
		// WaitBudget(0): a claim left behind would make the second call
		// "in progress".
		out, err := g.Execute(t.Context(), "otp-1", fpA, fn, middleware.WaitBudget(0))
		if err != nil || out.Replayed || out.Recorded || string(out.Value) != "wrong one-time password" {
			t.Fatalf("call %d: %+v, %v; want the response, not recorded", i, out, err)
		}
		if _, ok, err := g.Inspect(t.Context(), "", "otp-1", false); ok || err != nil {
			t.Fatalf("call %d: a record is there (%v)", i, err)
		}
	}
	if runs.Load() != 2 {
		t.Fatalf("fn ran %d times; want 2", runs.Load())
	}
	for _, e := range ev.list {
		if e.Kind != middleware.EventExecuted || e.Recorded || e.Err != nil {
			t.Fatalf("event %+v; want executed, not recorded", e)
		}
	}
	// Through Do, from a ctx derived from the work's.
	n := 0
	for range 2 {
		v, replayed, err := middleware.Do(t.Context(), g, "otp-2", nil, func(ctx context.Context) (int, error) {
			n++
			d, cancel := context.WithCancel(ctx)
			defer cancel()
			middleware.DoNotRecord(d)
			return n, nil
		}, middleware.WaitBudget(0))
		if err != nil || replayed || v != n {
			t.Fatalf("Do: %v, %v, %v", v, replayed, err)
		}
	}
	if n != 2 {
		t.Fatalf("Do ran its work %d times; want 2", n)
	}
}

// TestWatchOutcome: a watched ctx holds the outcome of the last call made
// with it, none before; Bypass sets it too.
func TestWatchOutcome(t *testing.T) {
	g := newGuard(t, memstore.New())
	ctx, outcome := middleware.WatchOutcome(t.Context())
	if e, ok := outcome(); ok {
		t.Fatalf("an outcome %+v before any call", e)
	}
	var runs atomic.Int32
	out, err := g.Execute(ctx, "k", fpA, value(&runs, "resp"))
	if err != nil {
		t.Fatal(err)
	}
	e, ok := outcome()
	if !ok || e.Kind != middleware.EventExecuted || !e.Recorded || e.Size != 4 || e.Fence != out.Fence || e.KeyHash == "" {
		t.Fatalf("after an execution: %+v (%v)", e, ok)
	}
	// A ctx derived from the watched one reports to the same watch.
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := g.Execute(dctx, "k", fpA, value(&runs, "x")); err != nil {
		t.Fatal(err)
	}
	if e, _ := outcome(); e.Kind != middleware.EventReplayed || e.Fence != out.Fence || e.Size != 4 {
		t.Fatalf("after a replay: %+v; want the replay", e)
	}
	_, err = g.Execute(ctx, "k", fpB, value(&runs, "x"))
	if e, _ := outcome(); e.Kind != middleware.EventMismatch || !errors.Is(e.Err, middleware.ErrMismatch) || e.Err != err {
		t.Fatalf("after a mismatch: %+v; want the mismatch with the call's error", e)
	}
	_, err = g.Execute(ctx, "", fpA, value(&runs, "x"))
	if e, _ := outcome(); e.Kind != middleware.EventRejected || e.Err != err || !errors.Is(err, middleware.ErrInvalidKey) {
		t.Fatalf("after an empty key: %+v; want rejected", e)
	}

	// Another watch is not told.
	ctx2, outcome2 := middleware.WatchOutcome(t.Context())
	g.Bypass(ctx2, middleware.EventPassedThrough, nil, middleware.Operation("GET /orders"), middleware.Scope("s"))
	e, ok = outcome2()
	if !ok || e.Kind != middleware.EventPassedThrough || e.Operation != "GET /orders" || e.ScopeHash == "" || e.KeyHash != "" || e.Err != nil {
		t.Fatalf("after Bypass: %+v (%v)", e, ok)
	}
	if e, _ := outcome(); e.Kind != middleware.EventRejected {
		t.Fatalf("the first watch changed to %v by a call on another ctx", e.Kind)
	}
	bad := errors.New("malformed key")
	g.Bypass(ctx2, middleware.EventRejected, bad)
	if e, _ := outcome2(); e.Kind != middleware.EventRejected || e.Err != bad || e.Operation != "" || e.ScopeHash != "" {
		t.Fatalf("after a rejection: %+v", e)
	}
	g.Bypass(ctx2, middleware.EventExecuted, nil)
	if e, _ := outcome2(); e.Kind != middleware.EventRejected {
		t.Fatalf("Bypass with kind executed changed the outcome to %v; want it ignored", e.Kind)
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times", runs.Load())
	}
}

// TestRecordTTLPerCall: the record of a call with RecordTTL expires that
// long after it was written, others after the guard's record TTL; an
// invalid TTL is refused before anything runs.
func TestRecordTTLPerCall(t *testing.T) {
	var ev events
	g := newGuard(t, memstore.New(), middleware.WithRecordTTL(2*time.Hour), middleware.WithHook(&ev))
	var runs atomic.Int32
	for _, c := range []struct {
		key  string
		opts []middleware.CallOption
		want time.Duration
	}{
		{"default", nil, 2 * time.Hour},
		{"short", []middleware.CallOption{middleware.RecordTTL(90 * time.Second)}, 90 * time.Second},
		{"long", []middleware.CallOption{middleware.RecordTTL(7 * 24 * time.Hour)}, 7 * 24 * time.Hour},
		{"minimum", []middleware.CallOption{middleware.RecordTTL(time.Millisecond)}, time.Millisecond},
	} {
		if _, err := g.Execute(t.Context(), c.key, fpA, value(&runs, "v"), c.opts...); err != nil {
			t.Fatalf("%s: %v", c.key, err)
		}
		in, ok, err := g.Inspect(t.Context(), "", c.key, false)
		if c.key == "minimum" && !ok {
			continue // it may have expired already
		}
		if err != nil || !ok || in.ExpiresAt.Sub(in.CreatedAt) != c.want {
			t.Fatalf("%s: the record lives %v (%+v, %v, %v); want %v", c.key, in.ExpiresAt.Sub(in.CreatedAt), in, ok, err, c.want)
		}
	}
	// Through Do, for a value recorded not replayable too.
	if _, _, err := middleware.Do(t.Context(), g, "do", nil, func(context.Context) (chan int, error) { return nil, nil }, middleware.RecordTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if in, ok, _ := g.Inspect(t.Context(), "", "do", false); !ok || in.State != store.StateNotReplayable || in.ExpiresAt.Sub(in.CreatedAt) != time.Minute {
		t.Fatalf("Do with RecordTTL: %+v, %v; want not replayable for a minute", in, ok)
	}

	ev = events{}
	before := runs.Load()
	for _, d := range []time.Duration{0, -time.Second, time.Millisecond - 1} {
		_, err := g.Execute(t.Context(), "bad-ttl", fpA, value(&runs, "v"), middleware.RecordTTL(d))
		if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !errors.Is(err, idemkit.ErrInvalidArgument) {
			t.Fatalf("RecordTTL(%v): %v; want InvalidArgument", d, err)
		}
	}
	if runs.Load() != before {
		t.Fatal("fn ran with an invalid record TTL")
	}
	if _, ok, _ := g.Inspect(t.Context(), "", "bad-ttl", false); ok {
		t.Fatal("a call with an invalid record TTL left a record")
	}
	if got := fmt.Sprint(ev.kinds()); got != "[rejected rejected rejected]" || ev.starts != 0 {
		t.Fatalf("events %s, %d starts; want three rejections and no start", got, ev.starts)
	}
}

// TestFingerprintFamilies: a key recorded under one family of fingerprint
// ("grpc") and reused by a request of another ("http") is a mismatch, also
// while the first runs; another version of the same family ("http-v1",
// "http-v2") replays.
func TestFingerprintFamilies(t *testing.T) {
	g := newGuard(t, memstore.New())
	sum := fpA.Sum()
	grpcV1, httpV1, httpV2 := fingerprint.New("grpc-v1", sum), fingerprint.New("http-v1", [32]byte{9}), fingerprint.New("http-v2", sum)
	var runs atomic.Int32
	if _, err := g.Execute(t.Context(), "g", grpcV1, value(&runs, "grpc")); err != nil {
		t.Fatal(err)
	}
	_, err := g.Execute(t.Context(), "g", httpV2, value(&runs, "http"))
	var me *middleware.MismatchError
	if !errors.As(err, &me) || me.Stored != grpcV1.String() || me.Got != httpV2.String() {
		t.Fatalf("an http-v2 request under a grpc-v1 record: %v; want a mismatch", err)
	}

	if _, err := g.Execute(t.Context(), "h", httpV1, value(&runs, "v1")); err != nil {
		t.Fatal(err)
	}
	out, err := g.Execute(t.Context(), "h", httpV2, value(&runs, "v2"))
	if err != nil || !out.Replayed || string(out.Value) != "v1" {
		t.Fatalf("an http-v2 request under an http-v1 record: %+v, %v; want a replay", out, err)
	}

	// While the grpc-v1 request still runs.
	entered, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := g.Execute(context.Background(), "running", grpcV1, func(context.Context) (middleware.Result, error) {
			close(entered)
			<-finish
			return middleware.Result{Value: []byte("grpc")}, nil
		})
		done <- err
	}()
	<-entered
	_, err = g.Execute(t.Context(), "running", httpV2, value(&runs, "http"), middleware.WaitBudget(time.Minute))
	close(finish)
	if !errors.Is(err, middleware.ErrMismatch) {
		t.Fatalf("an http-v2 request while a grpc-v1 one runs: %v; want a mismatch at once", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 2 {
		t.Fatalf("fn ran %d times; want 2", runs.Load())
	}
}

// beginStore is a [store.Transactor] over a memory store whose work begins
// its transaction when the work's code calls begin with its ctx, and
// commits by completing the record.
type beginStore struct{ store.Store }

type beginWorkKey struct{}

func (s beginStore) Work(ctx context.Context, _ string, _ idemkit.Fence) (context.Context, store.Work) {
	w := &beginWork{s: s.Store}
	return context.WithValue(ctx, beginWorkKey{}, w), w
}

// begin begins the transaction of the work of ctx.
func begin(ctx context.Context) { ctx.Value(beginWorkKey{}).(*beginWork).begun.Store(true) }

type beginWork struct {
	s     store.Store
	begun atomic.Bool
}

func (w *beginWork) Begun() bool { return w.begun.Load() }

func (w *beginWork) Commit(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	return w.s.Complete(ctx, rec, ttl)
}

func (w *beginWork) Rollback(context.Context) {}

// TestTransactionBegun: the work's ctx, and one derived from it, tell
// whether the work began a transaction that commits with its outcome, and
// whether it can: on a store.Transactor, not begun until the work begins
// it, begun from then on; on a store that is no Transactor, and outside a
// call, it cannot.
func TestTransactionBegun(t *testing.T) {
	if begun, can := middleware.TransactionBegun(t.Context()); begun || can {
		t.Fatalf("outside a call: begun=%v can=%v; want neither", begun, can)
	}
	type state struct{ begun, can bool }
	probe := func(ctx context.Context) state {
		begun, can := middleware.TransactionBegun(ctx)
		return state{begun, can}
	}
	for _, c := range []struct {
		name          string
		s             store.Store
		before, after state
	}{
		{"transactor", beginStore{memstore.New()}, state{false, true}, state{true, true}},
		{"no transactor", memstore.New(), state{false, false}, state{false, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newGuard(t, c.s)
			var before, after, derived state
			_, err := g.Execute(t.Context(), "k", fpA, func(ctx context.Context) (middleware.Result, error) {
				before = probe(ctx)
				if c.before.can {
					begin(ctx)
				}
				after = probe(ctx)
				d, cancel := context.WithCancel(ctx)
				defer cancel()
				derived = probe(d)
				return middleware.Result{Value: []byte("ok")}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if before != c.before || after != c.after || derived != c.after {
				t.Fatalf("before %+v, after %+v, derived %+v; want %+v, %+v, %+v", before, after, derived, c.before, c.after, c.after)
			}
		})
	}
}
