package nethttp_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/lock/memlock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// app is the business handler of the tests: it counts executions and
// answers 201 with a Location and the request body. Query parameters make
// it misbehave: sleep, status, panic, bytes, stream.
type app struct {
	executions atomic.Int32
	// gate, when set, blocks a stream=1 response after its first chunk
	// until it is closed.
	gate chan struct{}
}

func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := a.executions.Add(1)
	body, _ := io.ReadAll(r.Body)
	q := r.URL.Query()
	if d, err := time.ParseDuration(q.Get("sleep")); err == nil {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
		}
	}
	if q.Get("panic") == "1" {
		panic("the handler panicked on purpose")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
	w.Header().Set("Set-Cookie", fmt.Sprintf("session=%d", n))
	w.Header().Set("X-Custom", fmt.Sprint("custom-", n))
	status := http.StatusCreated
	if s, err := strconv.Atoi(q.Get("status")); err == nil {
		status = s
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
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"order": n, "request": string(body), "pad": pad})
}

// server is a real HTTP server on a loopback listener with the middleware in
// front of an app.
type server struct {
	*httptest.Server
	app   *app
	store *memstore.Store
	guard *middleware.Guard
}

func newServer(t *testing.T, gopts []middleware.Option, opts ...nethttp.Option) *server {
	t.Helper()
	s := &server{app: &app{}, store: memstore.New()}
	return s.start(t, s.store, memlock.New(), gopts, opts...)
}

func (s *server) start(t *testing.T, st store.Store, l *memlock.Locker, gopts []middleware.Option, opts ...nethttp.Option) *server {
	t.Helper()
	g, err := middleware.New(st, l, gopts...)
	if err != nil {
		t.Fatal(err)
	}
	s.guard = g
	opts = append([]nethttp.Option{nethttp.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	core, err := nethttp.NewCore(g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", core.Middleware()(s.app))
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
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
	if r.method == "" {
		r.method = http.MethodPost
	}
	if r.path == "" {
		r.path = "/orders"
	}
	req, err := http.NewRequestWithContext(t.Context(), r.method, s.URL+r.path, strings.NewReader(r.body))
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
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// problem decodes and checks an RFC 9457 answer.
func problem(t *testing.T, r response, status int, kind string) nethttp.Problem {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d (%s); want %d", r.status, r.body, status)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q; want application/problem+json", ct)
	}
	if cc := r.header.Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("Cache-Control %q; want no-store", cc)
	}
	var p nethttp.Problem
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	if p.Type != nethttp.DefaultProblemTypeBase+kind || p.Status != status || p.Title == "" {
		t.Fatalf("problem %+v; want type %s, status %d", p, kind, status)
	}
	return p
}

func wantExecutions(t *testing.T, s *server, n int32) {
	t.Helper()
	if got := s.app.executions.Load(); got != n {
		t.Fatalf("the handler ran %d times; want %d", got, n)
	}
}
