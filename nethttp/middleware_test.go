package nethttp_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/lock/memlock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/memstore"
)

func TestMethodNotGuardedPassesThrough(t *testing.T) {
	s := newServer(t, nil, nethttp.WithKeyRequired(true))
	for range 2 {
		r := s.do(t, request{method: http.MethodGet, key: []string{`"k"`, "a, b"}})
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("GET: %d %v", r.status, r.header)
		}
	}
	wantExecutions(t, s, 2)
}

func TestNoKeyOptionalPassesThrough(t *testing.T) {
	s := newServer(t, nil)
	for range 2 {
		if r := s.do(t, request{body: "{}"}); r.status != http.StatusCreated {
			t.Fatalf("status %d", r.status)
		}
	}
	wantExecutions(t, s, 2)
}

func TestNoKeyRequired(t *testing.T) {
	s := newServer(t, nil, nethttp.WithKeyRequired(true))
	problem(t, s.do(t, request{body: "{}"}), http.StatusBadRequest, nethttp.ProblemKeyMissing)
	wantExecutions(t, s, 0)
}

func TestMalformedKeys(t *testing.T) {
	s := newServer(t, nil, nethttp.WithKeyRequired(true))
	for name, key := range map[string][]string{
		"empty quoted":        {`""`},
		"256 characters":      {strings.Repeat("k", 256)},
		"a list":              {`"a", "b"`},
		"repeated lines":      {`"a"`, `"a"`},
		"unterminated":        {`"abc`},
		"bad escape":          {`"a\b"`},
		"non-ascii":           {"caf\xc3\xa9"},
		"bare with semicolon": {"a;b"},
	} {
		p := problem(t, s.do(t, request{key: key, body: "{}"}), http.StatusBadRequest, nethttp.ProblemKeyMalformed)
		if p.Detail == "" {
			t.Fatalf("%s: the problem does not say what is wrong", name)
		}
	}
	// 255 characters is fine.
	if r := s.do(t, request{key: []string{strings.Repeat("k", 255)}, body: "{}"}); r.status != http.StatusCreated {
		t.Fatalf("a 255-character key: %d %s", r.status, r.body)
	}
	// Control characters, sent on a raw connection (clients refuse to).
	conn, err := net.Dial("tcp", s.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: \"a\x01b\"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a control character: status %d", resp.StatusCode)
	}
	wantExecutions(t, s, 1)
}

func TestQuotedAndBareSpellTheSameKey(t *testing.T) {
	s := newServer(t, nil)
	first := s.do(t, request{key: []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, body: `{"a":1}`, ctype: "application/json"})
	second := s.do(t, request{key: []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324";origin=sdk`}, body: `{"a":1}`, ctype: "application/json"})
	if first.status != http.StatusCreated || second.header.Get("Idempotent-Replayed") != "true" || second.body != first.body {
		t.Fatalf("bare then quoted: %d, %d %q", first.status, second.status, second.header.Get("Idempotent-Replayed"))
	}
	// Keys are case-sensitive.
	third := s.do(t, request{key: []string{"8E03978E-40D5-43E8-BC93-6894A57F9324"}, body: `{"a":1}`, ctype: "application/json"})
	if third.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("an upper-case key replayed the lower-case key's response")
	}
	wantExecutions(t, s, 2)

	strict := newServer(t, nil, nethttp.WithStrictKeys(true))
	problem(t, strict.do(t, request{key: []string{"bare"}}), http.StatusBadRequest, nethttp.ProblemKeyMalformed)
	if r := strict.do(t, request{key: []string{`"quoted"`}}); r.status != http.StatusCreated {
		t.Fatalf("strict, quoted: %d", r.status)
	}
}

func TestReplay(t *testing.T) {
	s := newServer(t, nil, nethttp.WithKeyRequired(true))
	req := request{key: []string{`"order-1"`}, body: `{"item":"book"}`, ctype: "application/json"}
	first := s.do(t, req)
	if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %v", first.status, first.header)
	}
	time.Sleep(1100 * time.Millisecond) // let the Date header move on
	again := s.do(t, req)
	if again.status != http.StatusCreated || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %q %v", again.status, again.body, again.header)
	}
	for _, h := range []string{"Location", "Content-Type"} {
		if again.header.Get(h) != first.header.Get(h) {
			t.Fatalf("replayed %s = %q; want %q", h, again.header.Get(h), first.header.Get(h))
		}
	}
	if again.header.Get("Set-Cookie") != "" || again.header.Get("X-Custom") != "" {
		t.Fatalf("a replay repeated a header outside the allow-list: %v", again.header)
	}
	if again.header.Get("Date") == first.header.Get("Date") {
		t.Fatal("the replay repeated the first response's Date")
	}
	wantExecutions(t, s, 1)
}

func TestReplayHeaderAllowList(t *testing.T) {
	s := newServer(t, nil, nethttp.WithReplayHeaders("X-Custom", "Set-Cookie", "Date", "Content-Type"))
	req := request{key: []string{"k"}, body: "{}"}
	first := s.do(t, req)
	again := s.do(t, req)
	if again.header.Get("X-Custom") != first.header.Get("X-Custom") || again.header.Get("X-Custom") == "" {
		t.Fatalf("X-Custom on replay %q; want %q", again.header.Get("X-Custom"), first.header.Get("X-Custom"))
	}
	if again.header.Get("Location") != "" {
		t.Fatal("Location was replayed although the allow-list dropped it")
	}
	if again.header.Get("Set-Cookie") != "" {
		t.Fatal("Set-Cookie was replayed; it never is")
	}
}

func TestCORSExposure(t *testing.T) {
	s := &server{app: &app{}}
	g, _ := middleware.New(memstore.New(), memlock.New())
	mw := nethttp.Middleware(g)
	cors := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Access-Control-Allow-Origin", "https://app.example")
			w.Header().Set("Access-Control-Expose-Headers", "Location")
			next.ServeHTTP(w, r)
		})
	}
	s.Server = newHTTPServer(t, cors(mw(s.app)))
	req := request{key: []string{"k"}, body: "{}"}
	s.do(t, req)
	again := s.do(t, req)
	exposed := strings.Join(again.header.Values("Access-Control-Expose-Headers"), ",")
	if !strings.Contains(exposed, "Idempotent-Replayed") || !strings.Contains(exposed, "Location") {
		t.Fatalf("Access-Control-Expose-Headers %q; want Location and Idempotent-Replayed", exposed)
	}
}

func TestMismatch(t *testing.T) {
	s := newServer(t, nil)
	base := request{key: []string{"k"}, path: "/orders?x=1", body: `{"a":1,"b":2}`, ctype: "application/json"}
	if r := s.do(t, base); r.status != http.StatusCreated {
		t.Fatal(r.status)
	}
	// Key order and whitespace do not matter for JSON: a replay.
	same := base
	same.body = "{ \"b\": 2,\n \"a\": 1 }"
	if r := s.do(t, same); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("a JSON body with other key order: %d; want a replay", r.status)
	}
	for name, change := range map[string]func(*request){
		"another body":         func(r *request) { r.body = `{"a":1,"b":3}` },
		"another route":        func(r *request) { r.path = "/refunds?x=1" },
		"another method":       func(r *request) { r.method = http.MethodPatch },
		"another query":        func(r *request) { r.path = "/orders?x=2" },
		"another content type": func(r *request) { r.ctype = "text/plain" },
	} {
		r := base
		change(&r)
		t.Log(name)
		problem(t, s.do(t, r), http.StatusUnprocessableEntity, nethttp.ProblemKeyReused)
	}
	wantExecutions(t, s, 1)
}

func TestInProgress(t *testing.T) {
	s := newServer(t, nil, nethttp.WithWaitForResult(false), nethttp.WithRetryAfter(3*time.Second))
	slow := request{key: []string{"k"}, path: "/orders?sleep=400ms", body: "{}"}
	done := make(chan response, 1)
	go func() { done <- s.do(t, slow) }()
	waitExecutions(t, s, 1)
	r := s.do(t, slow)
	problem(t, r, http.StatusConflict, nethttp.ProblemInProgress)
	if r.header.Get("Retry-After") != "3" {
		t.Fatalf("Retry-After %q; want 3", r.header.Get("Retry-After"))
	}
	if first := <-done; first.status != http.StatusCreated {
		t.Fatalf("the first request: %d", first.status)
	}
	if r := s.do(t, slow); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("no replay once the first finished")
	}
	wantExecutions(t, s, 1)

	// Waiting mode: a duplicate waits within the guard's budget, then 409.
	w := newServer(t, []middleware.Option{middleware.WithWaitBudget(100 * time.Millisecond)})
	go func() { done <- w.do(t, request{key: []string{"k"}, path: "/orders?sleep=2s", body: "{}"}) }()
	waitExecutions(t, w, 1)
	start := time.Now()
	problem(t, w.do(t, request{key: []string{"k"}, path: "/orders?sleep=2s", body: "{}"}), http.StatusConflict, nethttp.ProblemInProgress)
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Fatalf("the duplicate was refused after %v, before its wait budget", waited)
	}
	<-done
}

func waitExecutions(t *testing.T, s *server, n int32) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.app.executions.Load() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("the handler did not start %d times", n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWaitingDuplicateGetsReplay(t *testing.T) {
	s := newServer(t, nil) // default wait budget: 2 s
	req := request{key: []string{"k"}, path: "/orders?sleep=300ms", body: "{}"}
	done := make(chan response, 1)
	go func() { done <- s.do(t, req) }()
	waitExecutions(t, s, 1)
	dup := s.do(t, req)
	first := <-done
	if dup.header.Get("Idempotent-Replayed") != "true" || dup.body != first.body {
		t.Fatalf("the waiting duplicate: %d %q; want the first response replayed", dup.status, dup.body)
	}
	wantExecutions(t, s, 1)
}

func TestStormExecutesOnce(t *testing.T) {
	// Three server processes sharing one store and one locker.
	st, l := memstore.New(), memlock.New()
	a := &app{}
	var servers []*server
	for range 3 {
		s := &server{app: a}
		servers = append(servers, s.start(t, st, l, []middleware.Option{middleware.WithWaitBudget(30 * time.Second)}))
	}
	var wg sync.WaitGroup
	bodies := make(chan string, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := servers[i%3].do(t, request{key: []string{"storm"}, path: "/orders?sleep=20ms", body: `{"x":1}`, ctype: "application/json"})
			if r.status != http.StatusCreated {
				t.Errorf("status %d %s", r.status, r.body)
			}
			bodies <- r.body
		}()
	}
	wg.Wait()
	close(bodies)
	first := ""
	for b := range bodies {
		if first == "" {
			first = b
		}
		if b != first {
			t.Fatalf("two different responses: %q and %q", first, b)
		}
	}
	if n := a.executions.Load(); n != 1 {
		t.Fatalf("the handler ran %d times for 50 duplicates on 3 servers", n)
	}
}

func TestNotReplayable(t *testing.T) {
	s := newServer(t, nil, nethttp.WithMaxResponseBytes(1000))
	for _, path := range []string{"/orders?stream=1", "/orders?bytes=5000"} {
		req := request{key: []string{path}, path: path, body: "{}"}
		first := s.do(t, req)
		if first.status != http.StatusCreated || len(first.body) < 20 {
			t.Fatalf("%s: the first response was not delivered whole: %d %q", path, first.status, first.body)
		}
		problem(t, s.do(t, req), http.StatusConflict, nethttp.ProblemNotReplayable)
	}
	wantExecutions(t, s, 2)
}

func TestStreamingArrivesIncrementally(t *testing.T) {
	s := newServer(t, nil)
	s.app.gate = make(chan struct{})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+"/orders?stream=1", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "stream")
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "chunk 1 of order 1\n" {
		t.Fatalf("the first chunk did not arrive while the handler was still running: %q, %v", line, err)
	}
	close(s.app.gate) // only now does the handler finish
	rest, _ := io.ReadAll(br)
	if string(rest) != "chunk 2 of order 1\n" {
		t.Fatalf("second chunk %q", rest)
	}
	problem(t, s.do(t, request{key: []string{"stream"}, path: "/orders?stream=1", body: "{}"}), http.StatusConflict, nethttp.ProblemNotReplayable)
	wantExecutions(t, s, 1)
}

func TestBackendUnavailable(t *testing.T) {
	s := newServer(t, nil, nethttp.WithRetryAfter(5*time.Second))
	_ = s.store.Close()
	r := s.do(t, request{key: []string{"k"}, body: "{}"})
	problem(t, r, http.StatusServiceUnavailable, nethttp.ProblemUnavailable)
	if r.header.Get("Retry-After") != "5" {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	wantExecutions(t, s, 0)

	open := newServer(t, nil, nethttp.WithFailOpen(true))
	_ = open.store.Close()
	if r := open.do(t, request{key: []string{"k"}, body: `{"kept":true}`}); r.status != http.StatusCreated || !strings.Contains(r.body, `kept`) {
		t.Fatalf("fail-open: %d %q; want the handler to run with the body", r.status, r.body)
	}
	wantExecutions(t, open, 1)
}

func TestBodyTooLarge(t *testing.T) {
	s := newServer(t, nil, nethttp.WithMaxBodyBytes(100))
	problem(t, s.do(t, request{key: []string{"k"}, body: strings.Repeat("x", 101)}), http.StatusRequestEntityTooLarge, nethttp.ProblemBodyTooLarge)
	// Chunked (no Content-Length): refused while streaming.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+"/orders", io.MultiReader(strings.NewReader(strings.Repeat("y", 60)), strings.NewReader(strings.Repeat("y", 60))))
	req.Header.Set("Idempotency-Key", "k2")
	req.ContentLength = -1
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked oversized body: %d", resp.StatusCode)
	}
	if r := s.do(t, request{key: []string{"k3"}, body: strings.Repeat("x", 100)}); r.status != http.StatusCreated {
		t.Fatalf("a body of exactly the limit: %d", r.status)
	}
	wantExecutions(t, s, 1)
}

func TestChunkedBodyFingerprintsLikeAFixedOne(t *testing.T) {
	s := newServer(t, nil)
	s.do(t, request{key: []string{"k"}, body: `{"a":1}`, ctype: "application/json"})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+"/orders", io.MultiReader(strings.NewReader(`{"a"`), strings.NewReader(`:1}`)))
	req.ContentLength = -1
	req.Header.Set("Idempotency-Key", "k")
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("a chunked retry of the same body: %d; want a replay", resp.StatusCode)
	}
	wantExecutions(t, s, 1)
}

func TestServerErrorsAndPanics(t *testing.T) {
	s := newServer(t, nil)
	for range 2 {
		if r := s.do(t, request{key: []string{"five"}, path: "/orders?status=503", body: "{}"}); r.status != 503 || r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("5xx: %d; want it delivered, not replayed", r.status)
		}
	}
	wantExecutions(t, s, 2)
	for range 2 {
		problem(t, s.do(t, request{key: []string{"panic"}, path: "/orders?panic=1", body: "{}"}), http.StatusInternalServerError, nethttp.ProblemInternal)
	}
	wantExecutions(t, s, 4)
	// 4xx are stored by default.
	s.do(t, request{key: []string{"four"}, path: "/orders?status=402", body: "{}"})
	if r := s.do(t, request{key: []string{"four"}, path: "/orders?status=402", body: "{}"}); r.status != 402 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("4xx retry: %d; want a replay", r.status)
	}
	wantExecutions(t, s, 5)

	stripe := newServer(t, nil, nethttp.WithStorePolicy(nethttp.StripeStorePolicy))
	for range 2 {
		stripe.do(t, request{key: []string{"five"}, path: "/orders?status=500", body: "{}"})
		stripe.do(t, request{key: []string{"panic"}, path: "/orders?panic=1", body: "{}"})
	}
	wantExecutions(t, stripe, 2)
}

func TestClientDisconnectMidRequestRetryReplays(t *testing.T) {
	s := newServer(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/orders?sleep=300ms", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "gone")
	errc := make(chan error, 1)
	go func() {
		_, err := s.Client().Do(req)
		errc <- err
	}()
	waitExecutions(t, s, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the client's request: %v", err)
	}
	// The handler finishes its work although the client left; the retry
	// (which may arrive while it still runs, and then waits) gets its
	// response.
	r := s.do(t, request{key: []string{"gone"}, path: "/orders?sleep=300ms", body: "{}"})
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %q; want a replay", r.status, r.header.Get("Idempotent-Replayed"))
	}
	wantExecutions(t, s, 1)
}

func TestHandlerThatGivesUpOnDisconnectIsForgotten(t *testing.T) {
	g, _ := middleware.New(memstore.New(), memlock.New())
	var mu sync.Mutex
	executions := 0
	started := make(chan struct{}, 2)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		executions++
		n := executions
		mu.Unlock()
		started <- struct{}{}
		if n == 1 {
			<-r.Context().Done() // gives up when the client leaves, answering nothing
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	srv := newHTTPServer(t, nethttp.Middleware(g)(handler))
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "k")
	errc := make(chan error, 1)
	go func() { _, err := srv.Client().Do(req); errc <- err }()
	<-started
	cancel()
	<-errc
	s := &server{Server: srv, app: &app{}}
	var r response
	for deadline := time.Now().Add(10 * time.Second); ; {
		// The first request's lock is released once its handler returns.
		r = s.do(t, request{path: "/", key: []string{"k"}, body: "{}"})
		if r.status != http.StatusConflict || time.Now().After(deadline) {
			break
		}
	}
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry: %d; want a fresh execution (the abandoned attempt answered nothing)", r.status)
	}
	mu.Lock()
	defer mu.Unlock()
	if executions != 2 {
		t.Fatalf("executions %d; want 2", executions)
	}
}

func TestScopesIsolateTenants(t *testing.T) {
	s := newServer(t, nil, nethttp.WithScope(func(r *http.Request) string { return r.Header.Get("X-Tenant") }))
	a := s.do(t, request{key: []string{"k"}, body: "{}", header: map[string]string{"X-Tenant": "acme"}})
	b := s.do(t, request{key: []string{"k"}, body: "{}", header: map[string]string{"X-Tenant": "globex"}})
	if b.header.Get("Idempotent-Replayed") != "" || a.body == b.body {
		t.Fatal("one tenant's key replayed another tenant's response")
	}
	if r := s.do(t, request{key: []string{"k"}, body: "{}", header: map[string]string{"X-Tenant": "acme"}}); r.body != a.body {
		t.Fatal("a tenant's own retry did not replay")
	}
	wantExecutions(t, s, 2)
}

func TestPathsUnderOnePatternAreDifferentRoutes(t *testing.T) {
	g, _ := middleware.New(memstore.New(), memlock.New())
	mw := nethttp.Middleware(g)
	a := &app{}
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}", mw(a))
	srv := newHTTPServer(t, mux)
	s := &server{Server: srv, app: a}
	s.do(t, request{path: "/orders/1", key: []string{"k"}, body: "{}"})
	// Paying order 2 with order 1's key is a mismatch, never order 1's
	// receipt.
	problem(t, s.do(t, request{path: "/orders/2", key: []string{"k"}, body: "{}"}), http.StatusUnprocessableEntity, nethttp.ProblemKeyReused)
	if r := s.do(t, request{path: "/orders/1", key: []string{"k"}, body: "{}"}); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same path: %d; want a replay", r.status)
	}
}

func TestConstruction(t *testing.T) {
	g, _ := middleware.New(memstore.New(), memlock.New())
	if _, err := nethttp.NewCore(nil); err == nil {
		t.Fatal("a nil guard was accepted")
	}
	for _, o := range []nethttp.Option{nethttp.WithHeader("bad header"), nethttp.WithMaxKeyLength(0), nethttp.WithMaxBodyBytes(0), nethttp.WithMaxResponseBytes(0), nethttp.WithRetryAfter(-1)} {
		if _, err := nethttp.NewCore(g, o); err == nil {
			t.Fatal("an invalid option was accepted")
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Middleware with an invalid option did not panic at construction")
		}
	}()
	nethttp.Middleware(g, nethttp.WithMaxBodyBytes(-1))
}

func newHTTPServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}
