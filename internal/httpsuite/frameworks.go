package httpsuite

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/middleware"
)

// The checks below are the client side of tests of a framework's own
// middleware flow (its skipper, its response object, its error handler, a
// middleware of its own in front of the adapter), which each adapter sets
// up in its framework and checks the same way.

// CheckOutcomesWatched checks what a middleware of the framework in front
// of the adapter, which watches the outcome through
// middleware.WatchOutcome and sends it on outcomes, sees. baseURL serves
// POST /orders/<id> (a route with a path parameter, key required) and no
// route at /nowhere; operation is the adapter's name for the route ("POST
// /orders/:id"): an execution, a replay, a mismatch and a request without
// a key are reported under it, and the framework's 404 for /nowhere is an
// execution without an operation.
func CheckOutcomesWatched(t *testing.T, baseURL string, outcomes <-chan middleware.Event, operation string) {
	t.Helper()
	for _, c := range []struct {
		path, key, body string
		kind            middleware.EventKind
		op              string
	}{
		{"/orders/1", "k", `{"a":1}`, middleware.EventExecuted, operation},
		{"/orders/1", "k", `{"a":1}`, middleware.EventReplayed, operation},
		{"/orders/1", "k", `{"a":2}`, middleware.EventMismatch, operation},
		{"/orders/1", "", `{}`, middleware.EventRejected, operation},
		{"/nowhere", "n", `{}`, middleware.EventExecuted, ""},
	} {
		Post(t, baseURL+c.path, c.key, c.body)
		select {
		case e := <-outcomes:
			if e.Kind != c.kind || e.Operation != c.op {
				t.Fatalf("%s %s: the middleware in front saw %s %q; want %s %q", c.path, c.body, e.Kind, e.Operation, c.kind, c.op)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the middleware in front saw no request")
		}
	}
}

// CheckSkipped checks a skipper. baseURL serves POST /orders (key
// required) and POST /internal/orders, which the skipper skips, both with
// a handler that answers 201 "order <n>", n its executions so far.
// Skipped requests need no key, are never recorded and are reported as
// passed through under skippedOp, the framework's route (passed returns
// the operations of the passed-through outcomes); guarded ones are
// refused without a key and replayed with one.
func CheckSkipped(t *testing.T, baseURL string, executions func() int32, passed func() []string, skippedOp string) {
	t.Helper()
	for i := range 2 {
		if got := Post(t, baseURL+"/internal/orders", "k", `{}`); got.Status != http.StatusCreated || got.Replayed() || got.Body != fmt.Sprint("order ", i+1) {
			t.Fatalf("skipped request %d: %d %q replayed=%v", i, got.Status, got.Body, got.Replayed())
		}
	}
	if got := Post(t, baseURL+"/internal/orders", "", `{}`); got.Status != http.StatusCreated {
		t.Fatalf("skipped request without a key: %d", got.Status)
	}
	if got := Post(t, baseURL+"/orders", "", `{}`); got.Status != http.StatusBadRequest {
		t.Fatalf("guarded request without a key: %d; want 400", got.Status)
	}
	first := Post(t, baseURL+"/orders", "k", `{}`)
	if again := Post(t, baseURL+"/orders", "k", `{}`); !again.Replayed() || again.Body != first.Body {
		t.Fatalf("guarded retry: %d %q; want a replay of %q", again.Status, again.Body, first.Body)
	}
	if n := executions(); n != 4 {
		t.Fatalf("ran %d times; want 4", n)
	}
	if ops := passed(); len(ops) != 3 || ops[0] != skippedOp || ops[2] != skippedOp {
		t.Fatalf("passed-through outcomes %q; want the 3 skipped requests, under the framework's route %q", ops, skippedOp)
	}
}

// FrontSaw is what a middleware of the framework in front of the adapter
// read from the framework's response object after the chain returned.
type FrontSaw struct {
	Status    int
	Size      int64
	Committed bool
	Err       error // what the chain returned
	Before    int   // how many times its before-the-status hook ran
}

// CheckFrontSeesResponse checks that a middleware in front of the adapter
// sees, in the framework's response object, what the client got: baseURL
// serves POST /orders (key required) with a handler that answers 201 JSON
// behind a route middleware, and the middleware in front sends a FrontSaw
// per request on seen. An execution, a replay, a mismatch and a request
// without a key all leave it committed with their status and size, no
// error and its before hook run once; handler and route count the
// executions of the handler and of the route middleware.
func CheckFrontSeesResponse(t *testing.T, baseURL string, seen <-chan FrontSaw, handler, route func() int32) {
	t.Helper()
	for _, c := range []struct {
		name     string
		key      string
		body     string
		status   int
		replayed bool
	}{
		{"first", "k", `{"a":1}`, http.StatusCreated, false},
		{"replay", "k", `{"a":1}`, http.StatusCreated, true},
		{"mismatch", "k", `{"a":2}`, http.StatusUnprocessableEntity, false},
		{"no key", "", `{}`, http.StatusBadRequest, false},
	} {
		got := Post(t, baseURL+"/orders", c.key, c.body)
		o := <-seen
		if got.Status != c.status || got.Replayed() != c.replayed {
			t.Fatalf("%s: %d replayed=%v; want %d replayed=%v", c.name, got.Status, got.Replayed(), c.status, c.replayed)
		}
		if o.Status != c.status || o.Size != int64(len(got.Body)) || !o.Committed || o.Err != nil || o.Before != 1 {
			t.Fatalf("%s: the middleware in front saw %+v; want status %d, size %d, committed, no error, its Before hook run once", c.name, o, c.status, len(got.Body))
		}
	}
	if handler() != 1 || route() != 1 {
		t.Fatalf("handler ran %d times, route middleware %d; want 1 and 1", handler(), route())
	}
}

// ErrorRendering is how the framework's error handler must answer an
// error a handler returned, and whether a retry replays that answer.
type ErrorRendering struct {
	Status   int
	Body     string // trimmed of white space
	Replayed bool   // the retry replays (else: runs again)
}

// CheckErrorRendered checks a handler's error rendered by the framework's
// error handler inside the guard: baseURL serves POST /orders with a
// handler that returns the error; the first request and its retry are
// answered as want says, and the handler and the error handler ran once
// (a replay) or twice, while no error left the adapter (escaped counts
// those a middleware in front saw).
func CheckErrorRendered(t *testing.T, baseURL string, want ErrorRendering, runs, rendered, escaped func() int32) {
	t.Helper()
	first := Post(t, baseURL+"/orders", "k", `{}`)
	again := Post(t, baseURL+"/orders", "k", `{}`)
	for i, got := range []Reply{first, again} {
		if got.Status != want.Status || strings.TrimSpace(got.Body) != want.Body {
			t.Fatalf("request %d: %d %q; want %d %s", i, got.Status, got.Body, want.Status, want.Body)
		}
	}
	wantRuns := int32(2)
	if want.Replayed {
		wantRuns = 1
	}
	if again.Replayed() != want.Replayed || runs() != wantRuns {
		t.Fatalf("retry replayed=%v after %d runs; want replayed=%v, %d runs", again.Replayed(), runs(), want.Replayed, wantRuns)
	}
	if rendered() != wantRuns || escaped() != 0 {
		t.Fatalf("the error handler ran %d times and %d errors left the middleware; want %d and 0", rendered(), escaped(), wantRuns)
	}
}

// ErrorSeen is what a middleware of the framework in front of the adapter
// read from the error the chain returned (zero for no error).
type ErrorSeen struct {
	Status     int    // the error's status
	Kind       string // the nethttp.Problem's kind it wraps
	RetryAfter string // the response's Retry-After
	SameStatus bool   // the Problem's status is the error's
}

// CheckRefusalsReturned checks refusals returned as errors to the
// framework's error handler. baseURL serves POST /orders behind the
// adapter with its refusals returned, nethttp.WithKeyRequired(true),
// WithWaitForResult(false), WithRetryAfter(2s) and a store policy that
// records everything, panics included; the handler counts its runs
// (executions), sleeps 300 ms with ?sleep=1, panics with ?panic=1 and
// answers 201 otherwise. A middleware in front sends an ErrorSeen per
// request on front. A request without a key, a mismatch and an in-progress
// duplicate reach it as errors with their problem, are answered with the
// status, no-store and Retry-After, and with a body that format checks; an
// execution is no error; a panic's 500 is rendered inside the guard and
// replayed.
func CheckRefusalsReturned(t *testing.T, baseURL string, front <-chan ErrorSeen, executions func() int32, format func(t *testing.T, got Reply, status int, kind string)) {
	t.Helper()
	check := func(name string, got Reply, status int, kind, retry string) {
		t.Helper()
		s := <-front
		if s.Status != status || s.Kind != kind || !s.SameStatus || s.RetryAfter != retry {
			t.Fatalf("%s: the middleware in front saw %+v; want an error with status %d, problem %s, Retry-After %q", name, s, status, kind, retry)
		}
		if got.Status != status || got.Header.Get("Cache-Control") != "no-store" || got.Header.Get("Retry-After") != retry {
			t.Fatalf("%s: %d %v; want %d, no-store, Retry-After %q", name, got.Status, got.Header, status, retry)
		}
		format(t, got, status, kind)
	}
	check("no key", Post(t, baseURL+"/orders", "", `{}`), http.StatusBadRequest, "idempotency-key-missing", "")
	Post(t, baseURL+"/orders", "k", `{"a":1}`)
	if s := <-front; s != (ErrorSeen{}) {
		t.Fatalf("an execution reached the middleware in front as an error: %+v", s)
	}
	check("mismatch", Post(t, baseURL+"/orders", "k", `{"a":2}`), http.StatusUnprocessableEntity, "idempotency-key-reused", "")
	done := make(chan struct{})
	go func() {
		defer close(done)
		Post(t, baseURL+"/orders?sleep=1", "slow", `{}`)
	}()
	for deadline := time.Now().Add(10 * time.Second); executions() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slow request did not start")
		}
	}
	check("in progress", Post(t, baseURL+"/orders?sleep=1", "slow", `{}`), http.StatusConflict, "idempotency-key-in-progress", "2")
	<-done
	<-front

	// The panic's 500: rendered inside the guard, recorded, replayed.
	first := Post(t, baseURL+"/orders?panic=1", "p", `{}`)
	<-front
	again := Post(t, baseURL+"/orders?panic=1", "p", `{}`)
	<-front
	if first.Status != http.StatusInternalServerError || !again.Replayed() || again.Body != first.Body || !strings.Contains(first.Body, "internal-error") {
		t.Fatalf("panic: %d %q, then %d %q replayed=%v", first.Status, first.Body, again.Status, again.Body, again.Replayed())
	}
	if n := executions(); n != 3 {
		t.Fatalf("the handler ran %d times; want 3", n)
	}
}

// WantProblemFields checks that got's body is a JSON object with the
// fields of the RFC 9457 problem of the given status and kind (under the
// default type base), whatever its Content-Type.
func WantProblemFields(t *testing.T, got Reply, status int, kind string) {
	t.Helper()
	var body map[string]any
	if err := json.Unmarshal([]byte(got.Body), &body); err != nil {
		t.Fatalf("%q: %v", got.Body, err)
	}
	if body["type"] != defaultProblemTypeBase+kind || body["status"] != float64(status) || body["title"] == "" {
		t.Fatalf("%q; want the fields of the problem %s", got.Body, kind)
	}
}

// WantErrorCode checks that got's body is the JSON {"error": {"code":
// kind, ...}} of a custom error handler.
func WantErrorCode(t *testing.T, got Reply, kind string) {
	t.Helper()
	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(got.Body), &body); err != nil || body.Error.Code != kind {
		t.Fatalf("%q: %v; want the custom error handler's format with the code %s", got.Body, err, kind)
	}
}

// CheckStreamedNotReplayable checks a response the handler flushed through
// the framework's writer: url answers 200 with the events "data: 0" to
// "data: 2", flushed one by one; they reach the client, and a retry gets
// 409 response-not-replayable without running the handler again.
func CheckStreamedNotReplayable(t *testing.T, url string, executions func() int32) {
	t.Helper()
	first := Post(t, url, "s", `{}`)
	if first.Status != http.StatusOK || first.Body != "data: 0\n\ndata: 1\n\ndata: 2\n\n" {
		t.Fatalf("stream: %d %q", first.Status, first.Body)
	}
	WantProblem(t, Post(t, url, "s", `{}`), http.StatusConflict, "response-not-replayable")
	if n := executions(); n != 1 {
		t.Fatalf("ran %d times", n)
	}
}

// CheckCompressedInsideTheGuard checks a framework's compressing
// middleware after the adapter: baseURL serves POST /orders, answered 201
// {"order":"42"} and gzip-compressed inside the capture. The record holds
// the gzip bytes; the replay carries their Content-Encoding (and Vary),
// and a retry that does not accept gzip gets 409 response-not-replayable,
// never the raw bytes.
func CheckCompressedInsideTheGuard(t *testing.T, baseURL string, executions func() int32) {
	t.Helper()
	// http.DefaultClient asks for gzip and decompresses transparently.
	first := Post(t, baseURL+"/orders", "gz-1", `{}`)
	second := Post(t, baseURL+"/orders", "gz-1", `{}`)
	if first.Status != http.StatusCreated || !strings.Contains(first.Body, `"order":"42"`) {
		t.Fatalf("first: %d %q", first.Status, first.Body)
	}
	if !second.Replayed() || second.Status != first.Status || second.Body != first.Body || second.Header.Get("Vary") != "Accept-Encoding" {
		t.Fatalf("replay: %d %q replayed=%v Vary %q; want the first answer", second.Status, second.Body, second.Replayed(), second.Header.Get("Vary"))
	}
	identity := Post(t, baseURL+"/orders", "gz-1", `{}`, "Accept-Encoding", "identity")
	WantProblem(t, identity, http.StatusConflict, "response-not-replayable")
	if n := executions(); n != 1 {
		t.Fatalf("the handler ran %d times", n)
	}
}
