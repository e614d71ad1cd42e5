package httpsuite

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store"
)

// The cases of observability and operations: what the handler reads from
// its context, outcomes not recorded at its request, every outcome seen by
// a hook and by a middleware in front, and record TTLs per route.

// callInfo is the app's callinfo=1 answer.
type callInfo struct {
	Operation string `json:"operation"`
	Scope     string `json:"scope"`
	Key       string `json:"key"`
	Fence     uint64 `json:"fence"`
	Hooked    bool   `json:"hooked"`
}

func decodeCallInfo(t *testing.T, r response) callInfo {
	t.Helper()
	if r.status != http.StatusCreated {
		t.Fatalf("callinfo: %d %s", r.status, r.body)
	}
	var c callInfo
	if err := json.Unmarshal([]byte(r.body), &c); err != nil {
		t.Fatalf("callinfo %q: %v", r.body, err)
	}
	return c
}

// testHandlerReadsCallInfo: the handler reads its key (unquoted), scope
// (from the scope hook), operation and fence from its context, and its
// context derives from the one the hook's IdempotencyStart returned; the
// fence is the one the hook reports and the record carries; a replay
// repeats the answer without running the handler.
func testHandlerReadsCallInfo(t *testing.T, s *suite) {
	o := newObserver()
	srv := s.observed(t, o, nil, nethttp.WithScope(func(r *http.Request) string { return r.Header.Get("X-Tenant") }))
	req := request{key: []string{`"info-1"`}, path: "/orders?callinfo=1", body: "{}", header: map[string]string{"X-Tenant": "acme"}}
	first := o.send(t, srv, "first", req)
	info := decodeCallInfo(t, first)
	e := o.want(t, "first", middleware.EventExecuted, info.Operation)
	if info.Key != "info-1" || info.Scope != "acme" || info.Fence == 0 || !info.Hooked || !strings.HasPrefix(info.Operation, "POST ") {
		t.Fatalf("the handler read %+v; want key info-1, scope acme, a fence, a POST operation, the hook's context", info)
	}
	if e.Fence.Uint64() != info.Fence {
		t.Fatalf("the handler's fence %d; the hook's %d", info.Fence, e.Fence.Uint64())
	}
	in, ok, err := srv.guard.Inspect(t.Context(), "acme", "info-1", false)
	if err != nil || !ok || in.Fence.Uint64() != info.Fence || in.State != store.StateCompleted {
		t.Fatalf("the record: %+v, %v, %v; want completed with fence %d", in, ok, err, info.Fence)
	}
	if again := o.send(t, srv, "again", req); !again.replayed() || again.body != first.body {
		t.Fatalf("retry: %d %q replayed=%v; want the first answer replayed", again.status, again.body, again.replayed())
	}
	other := req
	other.header = map[string]string{"X-Tenant": "globex"}
	if got := decodeCallInfo(t, o.send(t, srv, "globex", other)); got.Key != "info-1" || got.Scope != "globex" {
		t.Fatalf("another tenant's request read %+v", got)
	}
	wantExecutions(t, srv, 2)
}

// testDoNotRecordLeavesNothing: a handler that asks not to be recorded (a
// wrong one-time code) is answered, nothing is recorded, and a retry with
// the same key runs again, as does the corrected request after it, which
// is recorded.
func testDoNotRecordLeavesNothing(t *testing.T, s *suite) {
	o := newObserver()
	srv := s.observed(t, o, nil)
	wrong := request{key: []string{"otp"}, path: "/orders?norecord=1", body: `{"code":"000000"}`, ctype: "application/json"}
	for i, id := range []string{"wrong-1", "wrong-2"} {
		r := o.send(t, srv, id, wrong)
		if r.status != http.StatusBadRequest || r.replayed() || !strings.Contains(r.body, "wrong one-time code") {
			t.Fatalf("attempt %d: %d %q replayed=%v; want the handler's 400", i+1, r.status, r.body, r.replayed())
		}
		if e := o.want(t, id, middleware.EventExecuted, srv.app.lastInfo().Operation); e.Recorded {
			t.Fatalf("attempt %d: the outcome was recorded", i+1)
		}
		if _, ok, err := srv.guard.Inspect(t.Context(), "", "otp", false); ok || err != nil {
			t.Fatalf("attempt %d: a record is there (%v)", i+1, err)
		}
	}
	wantExecutions(t, srv, 2)
	right := request{key: []string{"otp"}, body: `{"code":"123456"}`, ctype: "application/json"}
	if r := o.send(t, srv, "right", right); r.status != http.StatusCreated || r.replayed() {
		t.Fatalf("the corrected request: %d replayed=%v", r.status, r.replayed())
	}
	if e := o.want(t, "right", middleware.EventExecuted, srv.app.lastInfo().Operation); !e.Recorded {
		t.Fatal("the corrected request was not recorded")
	}
	if r := o.send(t, srv, "right-again", right); !r.replayed() {
		t.Fatalf("the corrected request's retry: %d; want a replay", r.status)
	}
	wantExecutions(t, srv, 3)
}

// testOutcomesReachHooksAndWatchers: every outcome an HTTP request can have
// reaches the guard's hook, with the operation and the context of the
// request (a request id an outer middleware put there), and a middleware
// in front that watches the outcome sees the same.
func testOutcomesReachHooksAndWatchers(t *testing.T, s *suite) {
	o := newObserver()
	srv := s.observed(t, o, []middleware.Option{middleware.WithWaitBudget(time.Minute)})
	base := request{key: []string{"k"}, body: `{"a":1}`, ctype: "application/json"}

	if r := o.send(t, srv, "executed", base); r.status != http.StatusCreated {
		t.Fatalf("executed: %d", r.status)
	}
	op := srv.app.lastInfo().Operation
	if !strings.HasPrefix(op, "POST /") {
		t.Fatalf("the handler's operation %q; want the method and the route the framework matched", op)
	}
	executed := o.want(t, "executed", middleware.EventExecuted, op)
	if !executed.Recorded || executed.Fence == 0 || executed.Size == 0 {
		t.Fatalf("executed: %+v; want recorded, with a fence and a size", executed)
	}
	if r := o.send(t, srv, "replayed", base); !r.replayed() {
		t.Fatalf("replayed: %d", r.status)
	}
	if e := o.want(t, "replayed", middleware.EventReplayed, op); e.Fence != executed.Fence || e.KeyHash != executed.KeyHash {
		t.Fatalf("replayed: %+v; want the execution's fence and key", e)
	}
	other := base
	other.body = `{"a":2}`
	problem(t, o.send(t, srv, "mismatch", other), http.StatusUnprocessableEntity, "idempotency-key-reused")
	o.want(t, "mismatch", middleware.EventMismatch, op)
	bob := base
	bob.header = map[string]string{"Authorization": "Bearer bob"}
	problem(t, o.send(t, srv, "credentials", bob), http.StatusUnprocessableEntity, "idempotency-key-credentials-mismatch")
	o.want(t, "credentials", middleware.EventCredentialsMismatch, op)

	stream := request{key: []string{"stream"}, path: "/orders?stream=1", body: "{}"}
	o.send(t, srv, "streamed", stream)
	if e := o.want(t, "streamed", middleware.EventExecuted, op); !e.Recorded {
		t.Fatal("streamed: not recorded")
	}
	problem(t, o.send(t, srv, "not-replayable", stream), http.StatusConflict, "response-not-replayable")
	o.want(t, "not-replayable", middleware.EventNotReplayable, op)

	if r := o.send(t, srv, "server-error", request{key: []string{"5xx"}, path: "/orders?status=503", body: "{}"}); r.status != http.StatusServiceUnavailable {
		t.Fatalf("server error: %d", r.status)
	}
	if e := o.want(t, "server-error", middleware.EventExecuted, op); e.Recorded {
		t.Fatal("a 5xx was recorded")
	}

	o.send(t, srv, "get", request{method: http.MethodGet, key: []string{"k"}})
	o.want(t, "get", middleware.EventPassedThrough, "GET "+strings.TrimPrefix(op, "POST "))
	o.send(t, srv, "no-key", request{body: "{}"})
	o.want(t, "no-key", middleware.EventPassedThrough, op)
	problem(t, o.send(t, srv, "malformed", request{key: []string{`"a", "b"`}, body: "{}"}), http.StatusBadRequest, "idempotency-key-malformed")
	if e := o.want(t, "malformed", middleware.EventRejected, op); e.Err == nil {
		t.Fatal("rejected without a reason")
	}

	// Canceled: a duplicate waiting for a running request, whose client
	// goes away.
	firstCtx, stopFirst := context.WithCancel(t.Context())
	dupCtx, stopDup := context.WithCancel(t.Context())
	slow := request{key: []string{"slow"}, path: "/orders?sleep=1h", body: "{}"}
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		req := srv.newRequest(t, slow)
		req.Header.Set("X-Request-Id", "slow")
		if resp, err := srv.client.Do(req.WithContext(firstCtx)); err == nil {
			resp.Body.Close()
		}
	}()
	waitExecutions(t, srv, 6)
	go func() {
		defer func() { done <- struct{}{} }()
		req := srv.newRequest(t, slow)
		req.Header.Set("X-Request-Id", "canceled")
		if resp, err := srv.client.Do(req.WithContext(dupCtx)); err == nil {
			resp.Body.Close()
		}
	}()
	waitEvent(t, o, "canceled", middleware.EventWaiting)
	stopDup()
	o.want(t, "canceled", middleware.EventCanceled, op)
	stopFirst()
	<-done
	<-done

	// In progress: a duplicate that does not wait.
	nowait := s.serveGuard(t, srv.guard, srv.backends, srv.app, o.front, nethttp.WithWaitForResult(false))
	go func() {
		defer func() { done <- struct{}{} }()
		o.send(t, nowait, "running", request{key: []string{"busy"}, path: "/orders?sleep=300ms", body: "{}"})
	}()
	waitExecutions(t, srv, 7)
	problem(t, o.send(t, nowait, "in-progress", request{key: []string{"busy"}, path: "/orders?sleep=300ms", body: "{}"}), http.StatusConflict, "idempotency-key-in-progress")
	o.want(t, "in-progress", middleware.EventInProgress, op)
	<-done

	// The backend fails: unavailable, or failed open.
	down := s.observed(t, o, nil)
	down.backends.Break()
	problem(t, o.send(t, down, "unavailable", base), http.StatusServiceUnavailable, "idempotency-unavailable")
	if e := o.want(t, "unavailable", middleware.EventUnavailable, op); e.Err == nil {
		t.Fatal("unavailable without a reason")
	}
	open := s.observed(t, o, nil, nethttp.WithFailOpen(true))
	open.backends.Break()
	if r := o.send(t, open, "failed-open", request{key: []string{"k"}, path: "/orders?callinfo=1", body: "{}"}); decodeCallInfo(t, r).Key != "k" {
		t.Fatalf("failed open: the handler did not read its key: %s", r.body)
	}
	o.want(t, "failed-open", middleware.EventFailedOpen, op)
}

// waitEvent waits until the hook saw an event of kind for the request id.
func waitEvent(t *testing.T, o *observer, id string, kind middleware.EventKind) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		for _, e := range o.seen(id) {
			if e.Kind == kind {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("request %s: no %s event; the hook saw %s", id, kind, kinds(o.seen(id)))
		}
		time.Sleep(time.Millisecond)
	}
}

// testRecordTTLPerRoute: routes served by middleware instances that share
// one guard keep their records for their own record TTL, or the guard's.
func testRecordTTLPerRoute(t *testing.T, s *suite) {
	b := s.backends(t)
	g := newGuard(t, b, middleware.WithRecordTTL(48*time.Hour))
	a := &app{}
	for _, c := range []struct {
		key string
		ttl time.Duration // 0: the guard's
	}{{"payment", 7 * 24 * time.Hour}, {"message", time.Hour}, {"default", 0}} {
		var opts []nethttp.Option
		if c.ttl != 0 {
			opts = append(opts, nethttp.WithRecordTTL(c.ttl))
		}
		srv := s.serveGuard(t, g, b, a, nil, opts...)
		if r := srv.do(t, request{key: []string{c.key}, body: "{}"}); r.status != http.StatusCreated {
			t.Fatalf("%s: %d", c.key, r.status)
		}
		in, ok, err := g.Inspect(t.Context(), "", c.key, false)
		if err != nil || !ok {
			t.Fatalf("%s: no record (%v)", c.key, err)
		}
		want := c.ttl
		if want == 0 {
			want = 48 * time.Hour
		}
		if got := in.ExpiresAt.Sub(in.CreatedAt); got != want {
			t.Fatalf("%s: the record is kept for %v; want %v", c.key, got, want)
		}
	}
}

// testStepsResumeThroughTheAdapter: the handler reads the step helper
// from its request's context. A request that fails after its first step
// (503, not recorded) is retried: the retry resumes at the second step
// (the first is not run again, its recorded result is answered), and
// later retries replay the answer. On a store that records no steps
// (Compose), the step is refused as Misconfigured.
func testStepsResumeThroughTheAdapter(t *testing.T, s *suite) {
	srv := s.serve(t, nil)
	path := "/orders?steps=1&fail=1"
	if _, ok := srv.backends.Store.(store.Stepper); !ok {
		// Compose records no steps: the handler is told so.
		if r := Post(t, srv.url+path, "steps-1", `{}`); r.Status != http.StatusInternalServerError || !strings.Contains(r.Body, "Misconfigured") {
			t.Fatalf("a step on a store that records none: %d %s; want the Misconfigured error", r.Status, r.Body)
		}
		return
	}
	if r := Post(t, srv.url+path, "steps-1", `{}`); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("first run: %d %s; want the 503 after the first step", r.Status, r.Body)
	}
	r := Post(t, srv.url+path, "steps-1", `{}`)
	if r.Status != http.StatusCreated || r.Replayed() || strings.TrimSpace(r.Body) != `{"charge":"1","reserve":"1"}` {
		t.Fatalf("retry: %d %s replayed=%v; want 201 with the first run's reserve and one charge", r.Status, r.Body, r.Replayed())
	}
	if again := Post(t, srv.url+path, "steps-1", `{}`); !again.Replayed() || again.Body != r.Body {
		t.Fatalf("later retry: %d %s; want the replay", again.Status, again.Body)
	}
	if n0, n1 := srv.app.stepRuns[0].Load(), srv.app.stepRuns[1].Load(); n0 != 1 || n1 != 1 {
		t.Fatalf("the steps ran %d and %d times; want once each", n0, n1)
	}
}
