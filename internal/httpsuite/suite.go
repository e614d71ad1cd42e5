package httpsuite

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// Stack builds the stack under test: the framework's handler (a ServeMux,
// a gin engine, an echo instance) serving app for every path and method
// behind the adapter's idempotency middleware, built on guard with opts.
// The suite serves it on a real loopback listener, behind net/http
// middleware of its own where a case needs one in front (a request id in
// the context, an access log that watches outcomes).
type Stack func(t *testing.T, guard *middleware.Guard, opts []nethttp.Option, app http.Handler) http.Handler

// Backends are the backend a case's guards run on.
// Break makes them unreachable (the backend-outage rows).
type Backends struct {
	Store store.Store
	Break func()
}

// NewBackends builds fresh, isolated backends for one case.
type NewBackends func(t *testing.T) Backends

// Memory is the default [NewBackends]: memstore.
func Memory(t *testing.T) Backends {
	s := memstore.New()
	return Backends{Store: s, Break: func() { _ = s.Close() }}
}

// Run runs the behaviour suite against stack on the memory backend.
func Run(t *testing.T, stack Stack) { RunWith(t, stack, Memory) }

// RunWith runs the behaviour suite against stack on the backends that
// backends builds. Every case runs in parallel on its own backends.
func RunWith(t *testing.T, stack Stack, backends NewBackends) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, &suite{stack: stack, backends: backends})
		})
	}
}

type suite struct {
	stack    Stack
	backends NewBackends
}

type testCase struct {
	name string
	run  func(t *testing.T, s *suite)
}

// server is one stack under test with its app.
type server struct {
	url      string
	app      *app
	guard    *middleware.Guard
	backends Backends
	client   *http.Client
}

// serve builds a stack on fresh backends.
func (s *suite) serve(t *testing.T, gopts []middleware.Option, opts ...nethttp.Option) *server {
	t.Helper()
	return s.serveOn(t, s.backends(t), &app{}, gopts, opts...)
}

// serveOn builds a stack on given backends and app (several stacks can
// share them, as nodes of one service do).
func (s *suite) serveOn(t *testing.T, b Backends, app *app, gopts []middleware.Option, opts ...nethttp.Option) *server {
	t.Helper()
	g, err := middleware.New(b.Store, gopts...)
	if err != nil {
		t.Fatal(err)
	}
	return s.serveGuard(t, g, b, app, nil, opts...)
}

// serveGuard builds a stack on guard g (of backends b; several stacks can
// share one guard, as routes of one service do), with front, when not
// nil, in front of the framework's handler.
func (s *suite) serveGuard(t *testing.T, g *middleware.Guard, b Backends, app *app, front func(http.Handler) http.Handler, opts ...nethttp.Option) *server {
	t.Helper()
	h := s.stack(t, g, opts, app)
	if front != nil {
		h = front(h)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(client.CloseIdleConnections)
	return &server{url: Serve(t, h), app: app, guard: g, backends: b, client: client}
}

// app is the business handler of the suite. It counts its executions and
// answers 201 Created with a Location, a Set-Cookie, an X-Custom header,
// Cache-Control: no-store, private and the JSON {"order": n, "request":
// <body>, "pad": ...}. Query parameters make it misbehave on purpose:
//
//	echoauth=1        answer with the request's Authorization, Proxy-Authorization,
//	                  Cookie and X-Api-Key header lines as response headers
//	sleep=<duration>  wait before answering (until the request's ctx ends)
//	status=<code>     answer that status instead
//	set=<name>:<value>  set that response header, in place of the app's own (repeatable)
//	once=1            only the handler's first execution answers status and set;
//	                  later ones answer 201 as usual
//	panic=1           panic
//	bytes=<n>         n bytes of padding
//	stream=1          flush a first chunk, wait on gate (if set), then a second
//	giveup=1          on the handler's first execution: wait for the request's ctx
//	                  to end and answer nothing (later executions answer normally)
//	gzip=1            gzip the body, with Content-Encoding: gzip and Vary:
//	                  Accept-Encoding, as a compressing middleware inside the guard does
//	abort=early       panic with http.ErrAbortHandler before answering anything
//	abort=late        write the status and a first chunk, then panic with
//	                  http.ErrAbortHandler
//	callinfo=1        answer with what middleware.CallInfoFrom gives, as the
//	                  JSON {"operation", "scope", "key", "fence", "hooked"} (hooked:
//	                  the context carries what the observer's IdempotencyStart added)
//	tx=1              begin the work's transaction first, on a store that has one
//	                  (see txStore)
//	norecord=1        ask the guard not to record the outcome
//	                  (middleware.DoNotRecord), and answer 400, as for a wrong
//	                  one-time code
//	steps=1           run two steps (middleware.Step "reserve" then "charge",
//	                  each counted in stepRuns and answering its run's
//	                  number) and answer 201 {"reserve": r, "charge": c};
//	                  with fail=1, the first request that gets past
//	                  "reserve" answers 503 before "charge"
//
// Every execution keeps the middleware.CallInfo of its context (see
// lastInfo).
type app struct {
	executions atomic.Int32
	info       atomic.Pointer[middleware.CallInfo]
	// gate, when set, holds a stream=1 response after its first chunk
	// until it is closed.
	gate chan struct{}
	// stepRuns counts the runs of the steps of steps=1: reserve, charge.
	stepRuns [2]atomic.Int32
	failed   atomic.Bool // fail=1 has failed once
}

// runs returns how many times the handler ran.
func (a *app) runs() int32 { return a.executions.Load() }

// lastInfo returns the call information of the last execution (the zero
// CallInfo if it had none).
func (a *app) lastInfo() middleware.CallInfo {
	if p := a.info.Load(); p != nil {
		return *p
	}
	return middleware.CallInfo{}
}

// ServeHTTP implements http.Handler.
func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	info, _ := middleware.CallInfoFrom(r.Context())
	a.info.Store(&info)
	n := a.executions.Add(1)
	body, _ := io.ReadAll(r.Body)
	q := r.URL.Query()
	if q.Get("tx") == "1" {
		beginTx(r.Context())
	}
	if q.Get("callinfo") == "1" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"operation": info.Operation, "scope": info.Scope, "key": info.Key, "fence": info.Fence.Uint64(),
			"hooked": r.Context().Value(startedKey{}) != nil,
		})
		return
	}
	if q.Get("steps") == "1" {
		a.serveSteps(w, r, q.Get("fail") == "1")
		return
	}
	if q.Get("norecord") == "1" {
		if !middleware.DoNotRecord(r.Context()) {
			http.Error(w, "DoNotRecord: not in a guarded call", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":"wrong one-time code"}`)
		return
	}
	if q.Get("giveup") == "1" && n == 1 {
		<-r.Context().Done()
		return
	}
	if d, err := time.ParseDuration(q.Get("sleep")); err == nil {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
		}
	}
	if q.Get("panic") == "1" {
		panic("the handler panicked on purpose")
	}
	switch q.Get("abort") {
	case "early":
		panic(http.ErrAbortHandler)
	case "late":
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, "chunk 1 of order %d\n", n)
		panic(http.ErrAbortHandler)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
	w.Header().Set("Set-Cookie", fmt.Sprintf("session=%d", n))
	w.Header().Set("X-Custom", fmt.Sprint("custom-", n))
	w.Header().Set("Cache-Control", "no-store, private")
	if q.Get("echoauth") == "1" {
		for _, h := range []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key"} {
			w.Header()[h] = r.Header[h]
		}
	}
	status := http.StatusCreated
	if q.Get("once") != "1" || n == 1 {
		if s, err := strconv.Atoi(q.Get("status")); err == nil {
			status = s
		}
		for _, kv := range q["set"] {
			if name, value, ok := strings.Cut(kv, ":"); ok {
				w.Header().Set(name, value)
			}
		}
	}
	if q.Get("stream") == "1" {
		w.WriteHeader(status)
		rc := http.NewResponseController(w)
		_, _ = fmt.Fprintf(w, "chunk 1 of order %d\n", n)
		if err := rc.Flush(); err != nil {
			panic(err)
		}
		if a.gate != nil {
			<-a.gate
		}
		_, _ = fmt.Fprintf(w, "chunk 2 of order %d\n", n)
		return
	}
	pad := ""
	if b, err := strconv.Atoi(q.Get("bytes")); err == nil {
		pad = strings.Repeat("x", b)
	}
	if q.Get("gzip") == "1" {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Add("Vary", "Accept-Encoding")
		w.WriteHeader(status)
		zw := gzip.NewWriter(w)
		_ = json.NewEncoder(zw).Encode(map[string]any{"order": n, "request": string(body), "pad": pad})
		_ = zw.Close()
		return
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"order": n, "request": string(body), "pad": pad})
}

type request struct {
	method string
	path   string
	key    []string // header lines; nil: none
	body   string
	ctype  string
	header map[string]string
}

type response struct {
	status int
	header http.Header
	body   string
}

func (s *server) do(t *testing.T, r request) response {
	t.Helper()
	got := send(t, s.client, s.newRequest(t, r))
	return response{status: got.Status, header: got.Header, body: got.Body}
}

// tryDo sends r and reads what comes back, for a request whose connection
// may be cut: an error is not a failure.
func (s *server) tryDo(t *testing.T, r request) {
	t.Helper()
	resp, err := s.client.Do(s.newRequest(t, r))
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// newRequest builds r: POST /orders unless it says otherwise.
func (s *server) newRequest(t *testing.T, r request) *http.Request {
	t.Helper()
	if r.method == "" {
		r.method = http.MethodPost
	}
	if r.path == "" {
		r.path = "/orders"
	}
	req, err := http.NewRequestWithContext(t.Context(), r.method, s.url+r.path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range r.key {
		req.Header.Add("Idempotency-Key", k)
	}
	if r.ctype != "" {
		req.Header.Set("Content-Type", r.ctype)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	return req
}

// replayed reports whether the answer is a replay.
func (r response) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

// problem decodes and checks an RFC 9457 answer (see [WantProblem]).
func problem(t *testing.T, r response, status int, kind string) problemBody {
	t.Helper()
	return wantProblem(t, Reply{Status: r.status, Header: r.header, Body: r.body}, status, kind)
}

func wantExecutions(t *testing.T, s *server, n int32) {
	t.Helper()
	if got := s.app.runs(); got != n {
		t.Fatalf("the handler ran %d times; want %d", got, n)
	}
}

func waitExecutions(t *testing.T, s *server, n int32) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.app.runs() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("the handler did not start %d times", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// serveSteps answers steps=1 (see app).
func (a *app) serveSteps(w http.ResponseWriter, r *http.Request, fail bool) {
	var got [2]string
	for i, name := range []string{"reserve", "charge"} {
		if i == 1 && fail && a.failed.CompareAndSwap(false, true) {
			http.Error(w, "failing after the first step, as asked", http.StatusServiceUnavailable)
			return
		}
		res, err := middleware.Step(r.Context(), name, func(context.Context) ([]byte, error) {
			return []byte(strconv.Itoa(int(a.stepRuns[i].Add(1)))), nil
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		got[i] = string(res)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]string{"reserve": got[0], "charge": got[1]})
}
