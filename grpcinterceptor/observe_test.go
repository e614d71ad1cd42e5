package grpcinterceptor_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/middleware"
)

// ctxKey keys the values the tests put in a call's context.
type ctxKey string

const (
	callIDKey ctxKey = "call" // set by the outer interceptor: the call's number
	spanKey   ctxKey = "span" // set by the hook's IdempotencyStart
)

// observedMD marks the call a test observes.
const observedMD = "x-observed"

// observedCall returns ctx marking its call as the one observed.
func observedCall(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, observedMD, "1")
}

// hookEvent is one event a recordingHook got, with what its ctx held.
type hookEvent struct {
	middleware.Event
	callID int64 // the outer interceptor's value in the hook's ctx (0: none)
	span   bool  // the ctx holds the value IdempotencyStart put in it
}

// recordingHook records every event, and starts a "span" (a ctx value) for
// each guarded call.
type recordingHook struct {
	mu     sync.Mutex
	events []hookEvent
}

func (h *recordingHook) IdempotencyStart(ctx context.Context, e middleware.Event) context.Context {
	h.add(ctx, e)
	return context.WithValue(ctx, spanKey, true)
}

func (h *recordingHook) IdempotencyEvent(ctx context.Context, e middleware.Event) { h.add(ctx, e) }

func (h *recordingHook) add(ctx context.Context, e middleware.Event) {
	id, _ := ctx.Value(callIDKey).(int64)
	span, _ := ctx.Value(spanKey).(bool)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, hookEvent{Event: e, callID: id, span: span})
}

// of returns the events of call id.
func (h *recordingHook) of(id int64) []hookEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []hookEvent
	for _, e := range h.events {
		if e.callID == id {
			out = append(out, e)
		}
	}
	return out
}

// watched is what the outer interceptor saw of one call.
type watched struct {
	id       int64
	method   string
	observed bool // the call was marked observed
	outcome  middleware.Event
	ok       bool
}

// observer holds an outer interceptor, in front of the idempotency
// interceptor, that numbers each call in its ctx and watches its outcome,
// and an inner one, behind it, that notes what reached the handler.
type observer struct {
	next atomic.Int64

	mu      sync.Mutex
	calls   []watched
	reached map[int64]bool // call id → the handler's ctx held the hook's span
}

func (o *observer) outer(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	w := watched{id: o.next.Add(1), method: info.FullMethod, observed: len(metadata.ValueFromIncomingContext(ctx, observedMD)) > 0}
	ctx = context.WithValue(ctx, callIDKey, w.id)
	ctx, outcome := middleware.WatchOutcome(ctx)
	resp, err := handler(ctx, req)
	w.outcome, w.ok = outcome()
	o.mu.Lock()
	o.calls = append(o.calls, w)
	o.mu.Unlock()
	return resp, err
}

func (o *observer) inner(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	id, _ := ctx.Value(callIDKey).(int64)
	span, _ := ctx.Value(spanKey).(bool)
	o.mu.Lock()
	o.reached[id] = span
	o.mu.Unlock()
	return handler(ctx, req)
}

// observedOne returns the call marked observed.
func (o *observer) observedOne(t *testing.T) watched {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	var found []watched
	for _, w := range o.calls {
		if w.observed {
			found = append(found, w)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d calls marked observed, want 1", len(found))
	}
	return found[0]
}

// observedServer is a TestService behind the outer interceptor, the
// idempotency interceptor (on a guard with a recording hook) and the inner
// interceptor.
type observedServer struct {
	b      *backend
	g      *middleware.Guard
	svc    *service
	hook   *recordingHook
	obs    *observer
	client testgrpc.TestServiceClient
}

func newObservedServer(t *testing.T, prepare func(*service), opts ...grpcinterceptor.Option) *observedServer {
	t.Helper()
	f := &observedServer{b: newBackend(), svc: newService(), hook: &recordingHook{}, obs: &observer{reached: map[int64]bool{}}}
	if prepare != nil {
		prepare(f.svc)
	}
	f.g = f.b.guard(t, middleware.WithHook(f.hook))
	addr := serveChain(t, func(s *grpc.Server) { testgrpc.RegisterTestServiceServer(s, f.svc) },
		f.obs.outer, serverInterceptor(t, f.g, opts...), f.obs.inner)
	f.client = dial(t, addr)
	return f
}

// TestOutcomes: for every outcome, over a real client, an outer interceptor
// that watches its ctx reads the call's outcome after it, and the guard's
// hook gets the call's events: a start (for a call the guard ran), then
// exactly one outcome, the same as the outer interceptor read, with the
// full method as the operation and, in its ctx, the value the outer
// interceptor set and, after a start, the one the hook's start returned,
// which reaches the handler too.
func TestOutcomes(t *testing.T) {
	blocking := func(s *service) { s.started, s.release = make(chan struct{}, 1), make(chan struct{}) }
	tenantTooLong := grpcinterceptor.WithScope(func(context.Context) string { return strings.Repeat("t", 900) })
	for _, c := range []struct {
		name    string
		prepare func(*service)
		opts    []grpcinterceptor.Option
		// run makes the calls, the observed one marked with observedCall,
		// and returns the observed one's error.
		run    func(t *testing.T, f *observedServer) error
		kind   middleware.EventKind
		code   codes.Code
		method string // default: UnaryCall
		start  bool   // the guard started the call
		ran    bool   // the handler ran in the observed call
		stored bool   // the outcome was recorded (Event.Recorded)
	}{
		{name: "executed", kind: middleware.EventExecuted, code: codes.OK, start: true, ran: true, stored: true,
			run: func(t *testing.T, f *observedServer) error {
				return unary(observedCall(withKey(t.Context(), "k")), f.client, &testgrpc.SimpleRequest{}).err
			}},
		{name: "executed, not recorded", kind: middleware.EventExecuted, code: codes.Unavailable, start: true, ran: true,
			run: func(t *testing.T, f *observedServer) error {
				req := &testgrpc.SimpleRequest{ResponseStatus: &testgrpc.EchoStatus{Code: int32(codes.Unavailable), Message: "down"}}
				return unary(observedCall(withKey(t.Context(), "k")), f.client, req).err
			}},
		{name: "replayed", kind: middleware.EventReplayed, code: codes.OK, start: true,
			run: func(t *testing.T, f *observedServer) error {
				_ = unary(withKey(t.Context(), "k"), f.client, &testgrpc.SimpleRequest{})
				return unary(observedCall(withKey(t.Context(), "k")), f.client, &testgrpc.SimpleRequest{}).err
			}},
		{name: "mismatch", kind: middleware.EventMismatch, code: codes.FailedPrecondition, start: true,
			run: func(t *testing.T, f *observedServer) error {
				_ = unary(withKey(t.Context(), "k"), f.client, &testgrpc.SimpleRequest{ResponseSize: 1})
				return unary(observedCall(withKey(t.Context(), "k")), f.client, &testgrpc.SimpleRequest{ResponseSize: 2}).err
			}},
		{name: "credentials-mismatch", kind: middleware.EventCredentialsMismatch, code: codes.FailedPrecondition, start: true,
			run: func(t *testing.T, f *observedServer) error {
				_ = unary(withToken(t.Context(), "k", "Bearer alice"), f.client, &testgrpc.SimpleRequest{})
				return unary(observedCall(withToken(t.Context(), "k", "Bearer bob")), f.client, &testgrpc.SimpleRequest{}).err
			}},
		{name: "in-progress", prepare: blocking, opts: []grpcinterceptor.Option{grpcinterceptor.WithWaitForResult(false)},
			kind: middleware.EventInProgress, code: codes.Aborted, start: true,
			run: func(t *testing.T, f *observedServer) error {
				first := make(chan answer, 1)
				go func() { first <- unary(withKey(t.Context(), "k"), f.client, &testgrpc.SimpleRequest{}) }()
				waitFor(t, f.svc.started, "the first call")
				err := unary(observedCall(withKey(t.Context(), "k")), f.client, &testgrpc.SimpleRequest{}).err
				close(f.svc.release)
				if a := waitFor(t, first, "the first call"); a.err != nil {
					t.Fatal(a.err)
				}
				return err
			}},
		{name: "not-replayable", opts: []grpcinterceptor.Option{grpcinterceptor.WithMaxResponseBytes(512)},
			kind: middleware.EventNotReplayable, code: codes.FailedPrecondition, start: true,
			run: func(t *testing.T, f *observedServer) error {
				req := &testgrpc.SimpleRequest{ResponseSize: 4096}
				_ = unary(withKey(t.Context(), "k"), f.client, req)
				return unary(observedCall(withKey(t.Context(), "k")), f.client, req).err
			}},
		{name: "unavailable", kind: middleware.EventUnavailable, code: codes.Unavailable, start: true,
			run: func(t *testing.T, f *observedServer) error {
				f.b.store.fail.Store(true)
				return unary(observedCall(withKey(t.Context(), "k")), f.client, &testgrpc.SimpleRequest{}).err
			}},
		{name: "failed-open", opts: []grpcinterceptor.Option{grpcinterceptor.WithFailOpen(true)},
			kind: middleware.EventFailedOpen, code: codes.OK, start: true, ran: true,
			run: func(t *testing.T, f *observedServer) error {
				f.b.store.fail.Store(true)
				return unary(observedCall(withKey(t.Context(), "k")), f.client, &testgrpc.SimpleRequest{}).err
			}},
		{name: "passed-through, unguarded method", opts: []grpcinterceptor.Option{grpcinterceptor.WithExclude(emptyCall)},
			kind: middleware.EventPassedThrough, code: codes.OK, method: emptyCall, ran: true,
			run: func(t *testing.T, f *observedServer) error {
				_, err := f.client.EmptyCall(observedCall(t.Context()), &testgrpc.Empty{})
				return err
			}},
		{name: "passed-through, no key",
			kind: middleware.EventPassedThrough, code: codes.OK, ran: true,
			run: func(t *testing.T, f *observedServer) error {
				return unary(observedCall(t.Context()), f.client, &testgrpc.SimpleRequest{}).err
			}},
		{name: "rejected, no key", opts: []grpcinterceptor.Option{grpcinterceptor.WithKeyRequired(true)},
			kind: middleware.EventRejected, code: codes.InvalidArgument,
			run: func(t *testing.T, f *observedServer) error {
				return unary(observedCall(t.Context()), f.client, &testgrpc.SimpleRequest{}).err
			}},
		{name: "rejected, malformed key", kind: middleware.EventRejected, code: codes.InvalidArgument,
			run: func(t *testing.T, f *observedServer) error {
				return unary(observedCall(withKey(t.Context(), "a b")), f.client, &testgrpc.SimpleRequest{}).err
			}},
		{name: "rejected, key too long for its scope", opts: []grpcinterceptor.Option{tenantTooLong},
			kind: middleware.EventRejected, code: codes.InvalidArgument,
			run: func(t *testing.T, f *observedServer) error {
				return unary(observedCall(withKey(t.Context(), strings.Repeat("k", 255))), f.client, &testgrpc.SimpleRequest{}).err
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newObservedServer(t, c.prepare, c.opts...)
			err := c.run(t, f)
			if got := status.Code(err); got != c.code {
				t.Fatalf("code = %v (%v), want %v", got, err, c.code)
			}
			method := c.method
			if method == "" {
				method = unaryCall
			}

			// The outer interceptor's watch.
			w := f.obs.observedOne(t)
			if !w.ok || w.outcome.Kind != c.kind || w.outcome.Operation != method || w.method != method {
				t.Fatalf("watched outcome %v (ok %v) of %s, operation %q; want %v of %s", w.outcome.Kind, w.ok, w.method, w.outcome.Operation, c.kind, method)
			}
			if w.outcome.Recorded != c.stored {
				t.Fatalf("watched outcome recorded: %v, want %v", w.outcome.Recorded, c.stored)
			}
			if c.kind == middleware.EventRejected && w.outcome.Err == nil {
				t.Fatal("a rejection without its error")
			}

			// The hook's events for the call.
			events := f.hook.of(w.id)
			if len(events) == 0 {
				t.Fatal("the hook got no event whose ctx holds the outer interceptor's value")
			}
			if got := events[0].Kind == middleware.EventStart; got != c.start {
				t.Fatalf("first event %v; want a start: %v", events[0].Kind, c.start)
			}
			outcomes := 0
			for _, e := range events {
				if e.Kind.Outcome() {
					outcomes++
				}
				if e.Operation != method {
					t.Fatalf("event %v: operation %q, want %q", e.Kind, e.Operation, method)
				}
			}
			last := events[len(events)-1]
			if outcomes != 1 || last.Kind != c.kind {
				t.Fatalf("events %v; want one outcome, %v, last", kinds(events), c.kind)
			}
			if last.KeyHash != w.outcome.KeyHash || last.Duration != w.outcome.Duration {
				t.Fatal("the hook's outcome and the watched one differ")
			}
			if last.span != c.start {
				t.Fatalf("the outcome's ctx holds the start's value: %v, want %v", last.span, c.start)
			}

			// The handler.
			f.obs.mu.Lock()
			span, reached := f.obs.reached[w.id]
			f.obs.mu.Unlock()
			if reached != c.ran {
				t.Fatalf("the handler ran: %v, want %v", reached, c.ran)
			}
			if reached && span != c.start {
				t.Fatalf("the handler's ctx holds the hook's start value: %v, want %v", span, c.start)
			}
		})
	}
}

func kinds(events []hookEvent) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Kind.String()
	}
	return out
}

// infoService answers UnaryCall with what middleware.CallInfoFrom reads
// from its ctx: the key in ServerId, the scope in Username, the operation
// in OauthScope and the fence in Hostname. A request with FillUsername set
// asks that its outcome not be recorded (middleware.DoNotRecord).
type infoService struct {
	testgrpc.UnimplementedTestServiceServer
	executions atomic.Int64
}

func (s *infoService) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.executions.Add(1)
	info, ok := middleware.CallInfoFrom(ctx)
	if !ok {
		return nil, status.Error(codes.FailedPrecondition, "no call information in the handler's ctx")
	}
	if req.GetFillUsername() && !middleware.DoNotRecord(ctx) {
		return nil, status.Error(codes.FailedPrecondition, "DoNotRecord outside a guarded call")
	}
	return &testgrpc.SimpleResponse{ServerId: info.Key, Username: info.Scope, OauthScope: info.Operation, Hostname: info.Fence.String()}, nil
}

// fenceOf parses the fence an infoService answered.
func fenceOf(t *testing.T, resp *testgrpc.SimpleResponse) idemkit.Fence {
	t.Helper()
	n, err := strconv.ParseUint(resp.GetHostname(), 10, 64)
	if err != nil || n == 0 {
		t.Fatalf("fence %q", resp.GetHostname())
	}
	return idemkit.Fence(n)
}

// TestHandlerCallInfo: the handler reads its key, scope (from the scope
// hook), operation and fence from its ctx; the fence is the record's; a
// replay answers what the first execution read.
func TestHandlerCallInfo(t *testing.T) {
	tenant := func(ctx context.Context) string {
		if v := metadata.ValueFromIncomingContext(ctx, "x-tenant"); len(v) == 1 {
			return v[0]
		}
		return ""
	}
	g := newBackend().guard(t)
	svc := &infoService{}
	c := dial(t, serve(t, g, svc, grpcinterceptor.WithScope(tenant)))
	ctx := metadata.AppendToOutgoingContext(withKey(t.Context(), "pay-1"), "x-tenant", "acme:eu")
	first := unary(ctx, c, &testgrpc.SimpleRequest{})
	if first.err != nil {
		t.Fatal(first.err)
	}
	if r := first.resp; r.GetServerId() != "pay-1" || r.GetUsername() != "acme:eu" || r.GetOauthScope() != unaryCall {
		t.Fatalf("call info: key %q scope %q operation %q", r.GetServerId(), r.GetUsername(), r.GetOauthScope())
	}
	fence := fenceOf(t, first.resp)
	in, ok, err := g.Inspect(t.Context(), "acme:eu", "pay-1", false)
	if err != nil || !ok || in.Fence != fence {
		t.Fatalf("the record: %v %v, fence %v; want the handler's fence %v", ok, err, in.Fence, fence)
	}
	again := unary(ctx, c, &testgrpc.SimpleRequest{})
	if again.err != nil || !again.replayed() || fenceOf(t, again.resp) != fence {
		t.Fatalf("retry: %v replayed=%v", again.err, again.replayed())
	}
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

// TestHandlerDoNotRecord: a handler that calls middleware.DoNotRecord gets
// its answer delivered and not recorded: the retry runs again, under a
// newer fence.
func TestHandlerDoNotRecord(t *testing.T) {
	g := newBackend().guard(t)
	svc := &infoService{}
	c := dial(t, serve(t, g, svc))
	ctx := withKey(t.Context(), "otp-1")
	req := &testgrpc.SimpleRequest{FillUsername: true}
	first := unary(ctx, c, req)
	if first.err != nil || first.replayed() {
		t.Fatalf("%v replayed=%v", first.err, first.replayed())
	}
	if _, ok, err := g.Inspect(t.Context(), "", "otp-1", false); err != nil || ok {
		t.Fatalf("a record after DoNotRecord: %v %v", ok, err)
	}
	again := unary(ctx, c, req)
	if again.err != nil || again.replayed() {
		t.Fatalf("retry: %v replayed=%v; want a second execution", again.err, again.replayed())
	}
	if f1, f2 := fenceOf(t, first.resp), fenceOf(t, again.resp); f2.Compare(f1) <= 0 {
		t.Fatalf("fences %v then %v; want the retry's greater", f1, f2)
	}
	if n := svc.executions.Load(); n != 2 {
		t.Fatalf("executions = %d, want 2", n)
	}
	// Without DoNotRecord, the same handler's answer sticks.
	ctx = withKey(t.Context(), "otp-2")
	_ = unary(ctx, c, &testgrpc.SimpleRequest{})
	if a := unary(ctx, c, &testgrpc.SimpleRequest{}); a.err != nil || !a.replayed() {
		t.Fatalf("without DoNotRecord: %v replayed=%v", a.err, a.replayed())
	}
}

// TestRecordTTL: WithRecordTTL sets how long this interceptor's outcomes
// are kept, as Guard.Inspect shows; another interceptor on the same guard
// keeps the guard's.
func TestRecordTTL(t *testing.T) {
	g := newBackend().guard(t)
	short := dial(t, serve(t, g, newService(), grpcinterceptor.WithRecordTTL(90*time.Minute)))
	plain := dial(t, serve(t, g, newService()))
	for _, c := range []struct {
		client testgrpc.TestServiceClient
		key    string
		ttl    time.Duration
	}{
		{short, "short", 90 * time.Minute},
		{plain, "plain", 24 * time.Hour},
	} {
		before := time.Now()
		if a := unary(withKey(t.Context(), c.key), c.client, &testgrpc.SimpleRequest{}); a.err != nil {
			t.Fatal(a.err)
		}
		after := time.Now()
		in, ok, err := g.Inspect(t.Context(), "", c.key, false)
		if err != nil || !ok {
			t.Fatalf("%s: %v %v", c.key, ok, err)
		}
		if in.ExpiresAt.Before(before.Add(c.ttl)) || in.ExpiresAt.After(after.Add(c.ttl)) {
			t.Fatalf("%s: expires at %v; want %v after the call (%v to %v)", c.key, in.ExpiresAt, c.ttl, before, after)
		}
	}
	for _, d := range []time.Duration{0, time.Microsecond, -time.Second} {
		if si, err := grpcinterceptor.New(g, grpcinterceptor.WithRecordTTL(d)); err == nil || si != nil || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Errorf("WithRecordTTL(%v) accepted (%v)", d, err)
		}
	}
	if ci, err := grpcinterceptor.NewClientInterceptor(grpcinterceptor.WithRecordTTL(time.Hour)); err == nil || ci != nil {
		t.Error("the client interceptor accepted WithRecordTTL")
	}
}
