package httpsuite

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// cases are the suite's cases, one per row of the HTTP table and per edge
// case around them.
var cases = []testCase{
	{"MethodNotGuardedPassesThrough", testMethodNotGuardedPassesThrough},
	{"NoKeyOptionalPassesThrough", testNoKeyOptionalPassesThrough},
	{"NoKeyRequired", testNoKeyRequired},
	{"MalformedKeys", testMalformedKeys},
	{"QuotedAndBareSpellTheSameKey", testQuotedAndBareSpellTheSameKey},
	{"Replay", testReplay},
	{"ReplayHeaderAllowList", testReplayHeaderAllowList},
	{"Mismatch", testMismatch},
	{"NumbersCompareByExactValue", testNumbersCompareByExactValue},
	{"InProgress", testInProgress},
	{"WaitingDuplicateGetsReplay", testWaitingDuplicateGetsReplay},
	{"StormExecutesOnce", testStormExecutesOnce},
	{"NotReplayable", testNotReplayable},
	{"StreamingArrivesIncrementally", testStreamingArrivesIncrementally},
	{"BackendUnavailable", testBackendUnavailable},
	{"BodyTooLarge", testBodyTooLarge},
	{"ChunkedBodyFingerprintsLikeAFixedOne", testChunkedBodyFingerprintsLikeAFixedOne},
	{"ServerErrorsAndPanics", testServerErrorsAndPanics},
	{"TryAgainAnswersNotRecorded", testTryAgainAnswersNotRecorded},
	{"TryAgainRecordedWhenThePolicySaysSo", testTryAgainRecordedWhenThePolicySaysSo},
	{"ReplayCarriesWhatTheClientNeeds", testReplayCarriesWhatTheClientNeeds},
	{"ClientDisconnectMidRequestRetryReplays", testClientDisconnectMidRequestRetryReplays},
	{"HandlerThatGivesUpOnDisconnectIsForgotten", testHandlerThatGivesUpOnDisconnectIsForgotten},
	{"ScopesIsolateTenants", testScopesIsolateTenants},
	{"CompressedResponseReplaysWithItsEncoding", testCompressedResponseReplaysWithItsEncoding},
	{"AbortedResponseIsNotReplayable", testAbortedResponseIsNotReplayable},
	{"CredentialsBindAuthorization", testCredentialsBindAuthorization},
	{"CredentialsBindCookie", testCredentialsBindCookie},
	{"CredentialsBindClientCertificate", testCredentialsBindClientCertificate},
	{"CredentialHeadersBindIdentityHeaders", testCredentialHeadersBindIdentityHeaders},
	{"ScopeReplacesCredentialBinding", testScopeReplacesCredentialBinding},
	{"CredentialHeadersNeverRecorded", testCredentialHeadersNeverRecorded},
	{"UnreadableRecordNeverFailsOpen", testUnreadableRecordNeverFailsOpen},
	{"QueryKey", testQueryKey},
	{"JSONKey", testJSONKey},
	{"FuncKey", testFuncKey},
	{"ProblemWriter", testProblemWriter},
	{"HandlerReadsCallInfo", testHandlerReadsCallInfo},
	{"StepsResumeThroughTheAdapter", testStepsResumeThroughTheAdapter},
	{"DoNotRecordLeavesNothing", testDoNotRecordLeavesNothing},
	{"OutcomesReachHooksAndWatchers", testOutcomesReachHooksAndWatchers},
	{"RecordTTLPerRoute", testRecordTTLPerRoute},
	{"TransactionFailuresAnswered", testTransactionFailuresAnswered},
	{"HeldResponseOverLimitRolledBack", testHeldResponseOverLimitRolledBack},
}

func testMethodNotGuardedPassesThrough(t *testing.T, s *suite) {
	srv := s.serve(t, nil, nethttp.WithKeyRequired(true))
	for range 2 {
		r := srv.do(t, request{method: http.MethodGet, key: []string{`"k"`, "a, b"}})
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("GET: %d %v", r.status, r.header)
		}
	}
	wantExecutions(t, srv, 2)
}

func testNoKeyOptionalPassesThrough(t *testing.T, s *suite) {
	srv := s.serve(t, nil)
	for range 2 {
		if r := srv.do(t, request{body: "{}"}); r.status != http.StatusCreated {
			t.Fatalf("status %d", r.status)
		}
	}
	wantExecutions(t, srv, 2)
}

func testNoKeyRequired(t *testing.T, s *suite) {
	srv := s.serve(t, nil, nethttp.WithKeyRequired(true))
	problem(t, srv.do(t, request{body: "{}"}), http.StatusBadRequest, "idempotency-key-missing")
	wantExecutions(t, srv, 0)
}

func testMalformedKeys(t *testing.T, s *suite) {
	srv := s.serve(t, nil, nethttp.WithKeyRequired(true))
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
		p := problem(t, srv.do(t, request{key: key, body: "{}"}), http.StatusBadRequest, "idempotency-key-malformed")
		if p.Detail == "" {
			t.Fatalf("%s: the problem does not say what is wrong", name)
		}
	}
	// 255 characters is fine.
	if r := srv.do(t, request{key: []string{strings.Repeat("k", 255)}, body: "{}"}); r.status != http.StatusCreated {
		t.Fatalf("a 255-character key: %d %s", r.status, r.body)
	}
	// Control characters, sent on a raw connection (clients refuse to).
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.url, "http://"))
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
	wantExecutions(t, srv, 1)
}

func testQuotedAndBareSpellTheSameKey(t *testing.T, s *suite) {
	srv := s.serve(t, nil)
	first := srv.do(t, request{key: []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, body: `{"a":1}`, ctype: "application/json"})
	second := srv.do(t, request{key: []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324";origin=sdk`}, body: `{"a":1}`, ctype: "application/json"})
	if first.status != http.StatusCreated || second.header.Get("Idempotent-Replayed") != "true" || second.body != first.body {
		t.Fatalf("bare then quoted: %d, %d %q", first.status, second.status, second.header.Get("Idempotent-Replayed"))
	}
	// Keys are case-sensitive.
	third := srv.do(t, request{key: []string{"8E03978E-40D5-43E8-BC93-6894A57F9324"}, body: `{"a":1}`, ctype: "application/json"})
	if third.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("an upper-case key replayed the lower-case key's response")
	}
	wantExecutions(t, srv, 2)

	strict := s.serve(t, nil, nethttp.WithStrictKeys(true))
	problem(t, strict.do(t, request{key: []string{"bare"}}), http.StatusBadRequest, "idempotency-key-malformed")
	if r := strict.do(t, request{key: []string{`"quoted"`}}); r.status != http.StatusCreated {
		t.Fatalf("strict, quoted: %d", r.status)
	}
}

func testReplay(t *testing.T, s *suite) {
	srv := s.serve(t, nil, nethttp.WithKeyRequired(true))
	req := request{key: []string{`"order-1"`}, body: `{"item":"book"}`, ctype: "application/json"}
	first := srv.do(t, req)
	if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %v", first.status, first.header)
	}
	time.Sleep(1100 * time.Millisecond) // let the Date header move on
	again := srv.do(t, req)
	if again.status != http.StatusCreated || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %q %v", again.status, again.body, again.header)
	}
	for _, h := range []string{"Location", "Content-Type", "Cache-Control"} {
		if again.header.Get(h) != first.header.Get(h) || again.header.Get(h) == "" {
			t.Fatalf("replayed %s = %q; want %q", h, again.header.Get(h), first.header.Get(h))
		}
	}
	if again.header.Get("Set-Cookie") != "" || again.header.Get("X-Custom") != "" {
		t.Fatalf("a replay repeated a header outside the allow-list: %v", again.header)
	}
	if again.header.Get("Date") == first.header.Get("Date") {
		t.Fatal("the replay repeated the first response's Date")
	}
	wantExecutions(t, srv, 1)
}

func testReplayHeaderAllowList(t *testing.T, s *suite) {
	srv := s.serve(t, nil, nethttp.WithReplayHeaders("X-Custom", "Set-Cookie", "Date", "Content-Type"))
	req := request{key: []string{"k"}, body: "{}"}
	first := srv.do(t, req)
	again := srv.do(t, req)
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

func testMismatch(t *testing.T, s *suite) {
	srv := s.serve(t, nil)
	base := request{key: []string{"k"}, path: "/orders?x=1", body: `{"a":1,"b":2}`, ctype: "application/json"}
	if r := srv.do(t, base); r.status != http.StatusCreated {
		t.Fatal(r.status)
	}
	// Key order and whitespace do not matter for JSON: a replay.
	same := base
	same.body = "{ \"b\": 2,\n \"a\": 1 }"
	if r := srv.do(t, same); r.header.Get("Idempotent-Replayed") != "true" {
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
		problem(t, srv.do(t, r), http.StatusUnprocessableEntity, "idempotency-key-reused")
	}
	wantExecutions(t, srv, 1)
}

// Numbers in a JSON body compare by their exact decimal value: the same
// amount spelled another way replays, an amount a float would round to the
// stored one is another request (422).
func testNumbersCompareByExactValue(t *testing.T, s *suite) {
	srv := s.serve(t, nil)
	for i, c := range []struct {
		stored string
		same   []string
		other  []string
	}{
		{`{"amount":100}`, []string{`{"amount":1e2}`, `{"amount":100.0}`, `{"amount":1.00E+2}`, `{"amount":10000e-2}`},
			[]string{`{"amount":100.000000000000001}`, `{"amount":100.0000000000000000000000000001}`, `{"amount":99.99999999999999999}`}},
		{`{"amount":19.99}`, []string{`{"amount":19.990}`, `{"amount":1999e-2}`},
			[]string{`{"amount":19.990000000000000001}`, `{"amount":19.989999999999999999}`}},
	} {
		key := []string{fmt.Sprint("amount-", i)}
		first := srv.do(t, request{key: key, body: c.stored, ctype: "application/json"})
		if first.status != http.StatusCreated {
			t.Fatalf("%s: %d", c.stored, first.status)
		}
		for _, body := range c.same {
			if r := srv.do(t, request{key: key, body: body, ctype: "application/json"}); r.header.Get("Idempotent-Replayed") != "true" || r.body != first.body {
				t.Fatalf("%s after %s: %d, replayed %q; want the stored response", body, c.stored, r.status, r.header.Get("Idempotent-Replayed"))
			}
		}
		for _, body := range c.other {
			t.Log(body, "after", c.stored)
			problem(t, srv.do(t, request{key: key, body: body, ctype: "application/json"}), http.StatusUnprocessableEntity, "idempotency-key-reused")
		}
	}
	wantExecutions(t, srv, 2)
}

func testInProgress(t *testing.T, s *suite) {
	srv := s.serve(t, nil, nethttp.WithWaitForResult(false), nethttp.WithRetryAfter(3*time.Second))
	slow := request{key: []string{"k"}, path: "/orders?sleep=400ms", body: "{}"}
	done := make(chan response, 1)
	go func() { done <- srv.do(t, slow) }()
	waitExecutions(t, srv, 1)
	r := srv.do(t, slow)
	problem(t, r, http.StatusConflict, "idempotency-key-in-progress")
	if r.header.Get("Retry-After") != "3" {
		t.Fatalf("Retry-After %q; want 3", r.header.Get("Retry-After"))
	}
	if first := <-done; first.status != http.StatusCreated {
		t.Fatalf("the first request: %d", first.status)
	}
	if r := srv.do(t, slow); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("no replay once the first finished")
	}
	wantExecutions(t, srv, 1)

	// Waiting mode: a duplicate waits within the guard's budget, then 409.
	w := s.serve(t, []middleware.Option{middleware.WithWaitBudget(100 * time.Millisecond)})
	go func() { done <- w.do(t, request{key: []string{"k"}, path: "/orders?sleep=2s", body: "{}"}) }()
	waitExecutions(t, w, 1)
	start := time.Now()
	problem(t, w.do(t, request{key: []string{"k"}, path: "/orders?sleep=2s", body: "{}"}), http.StatusConflict, "idempotency-key-in-progress")
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Fatalf("the duplicate was refused after %v, before its wait budget", waited)
	}
	<-done
}

func testWaitingDuplicateGetsReplay(t *testing.T, s *suite) {
	srv := s.serve(t, nil) // default wait budget: 2 s
	req := request{key: []string{"k"}, path: "/orders?sleep=300ms", body: "{}"}
	done := make(chan response, 1)
	go func() { done <- srv.do(t, req) }()
	waitExecutions(t, srv, 1)
	dup := srv.do(t, req)
	first := <-done
	if dup.header.Get("Idempotent-Replayed") != "true" || dup.body != first.body {
		t.Fatalf("the waiting duplicate: %d %q; want the first response replayed", dup.status, dup.body)
	}
	wantExecutions(t, srv, 1)
}

func testStormExecutesOnce(t *testing.T, s *suite) {
	// Three server processes sharing one backend.
	b := s.backends(t)
	a := &app{}
	var servers []*server
	for range 3 {
		servers = append(servers, s.serveOn(t, b, a, []middleware.Option{middleware.WithWaitBudget(30 * time.Second)}))
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
	if n := a.runs(); n != 1 {
		t.Fatalf("the handler ran %d times for 50 duplicates on 3 servers", n)
	}
}

func testNotReplayable(t *testing.T, s *suite) {
	srv := s.serve(t, nil, nethttp.WithMaxResponseBytes(1000))
	for _, path := range []string{"/orders?stream=1", "/orders?bytes=5000"} {
		req := request{key: []string{path}, path: path, body: "{}"}
		first := srv.do(t, req)
		if first.status != http.StatusCreated || len(first.body) < 20 {
			t.Fatalf("%s: the first response was not delivered whole: %d %q", path, first.status, first.body)
		}
		problem(t, srv.do(t, req), http.StatusConflict, "response-not-replayable")
	}
	wantExecutions(t, srv, 2)
}

func testStreamingArrivesIncrementally(t *testing.T, s *suite) {
	srv := s.serve(t, nil)
	srv.app.gate = make(chan struct{})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.url+"/orders?stream=1", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "stream")
	resp, err := srv.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "chunk 1 of order 1\n" {
		t.Fatalf("the first chunk did not arrive while the handler was still running: %q, %v", line, err)
	}
	close(srv.app.gate) // only now does the handler finish
	rest, _ := io.ReadAll(br)
	if string(rest) != "chunk 2 of order 1\n" {
		t.Fatalf("second chunk %q", rest)
	}
	problem(t, srv.do(t, request{key: []string{"stream"}, path: "/orders?stream=1", body: "{}"}), http.StatusConflict, "response-not-replayable")
	wantExecutions(t, srv, 1)
}

func testBackendUnavailable(t *testing.T, s *suite) {
	srv := s.serve(t, nil, nethttp.WithRetryAfter(5*time.Second))
	srv.backends.Break()
	r := srv.do(t, request{key: []string{"k"}, body: "{}"})
	problem(t, r, http.StatusServiceUnavailable, "idempotency-unavailable")
	if r.header.Get("Retry-After") != "5" {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	wantExecutions(t, srv, 0)

	open := s.serve(t, nil, nethttp.WithFailOpen(true))
	open.backends.Break()
	if r := open.do(t, request{key: []string{"k"}, body: `{"kept":true}`}); r.status != http.StatusCreated || !strings.Contains(r.body, `kept`) {
		t.Fatalf("fail-open: %d %q; want the handler to run with the body", r.status, r.body)
	}
	wantExecutions(t, open, 1)
}

func testBodyTooLarge(t *testing.T, s *suite) {
	srv := s.serve(t, nil, nethttp.WithMaxBodyBytes(100))
	problem(t, srv.do(t, request{key: []string{"k"}, body: strings.Repeat("x", 101)}), http.StatusRequestEntityTooLarge, "request-body-too-large")
	// Chunked (no Content-Length): refused while streaming.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.url+"/orders", io.MultiReader(strings.NewReader(strings.Repeat("y", 60)), strings.NewReader(strings.Repeat("y", 60))))
	req.Header.Set("Idempotency-Key", "k2")
	req.ContentLength = -1
	resp, err := srv.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked oversized body: %d", resp.StatusCode)
	}
	if r := srv.do(t, request{key: []string{"k3"}, body: strings.Repeat("x", 100)}); r.status != http.StatusCreated {
		t.Fatalf("a body of exactly the limit: %d", r.status)
	}
	wantExecutions(t, srv, 1)
}

func testChunkedBodyFingerprintsLikeAFixedOne(t *testing.T, s *suite) {
	srv := s.serve(t, nil)
	srv.do(t, request{key: []string{"k"}, body: `{"a":1}`, ctype: "application/json"})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.url+"/orders", io.MultiReader(strings.NewReader(`{"a"`), strings.NewReader(`:1}`)))
	req.ContentLength = -1
	req.Header.Set("Idempotency-Key", "k")
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("a chunked retry of the same body: %d; want a replay", resp.StatusCode)
	}
	wantExecutions(t, srv, 1)
}

func testServerErrorsAndPanics(t *testing.T, s *suite) {
	srv := s.serve(t, nil)
	for range 2 {
		if r := srv.do(t, request{key: []string{"five"}, path: "/orders?status=503", body: "{}"}); r.status != 503 || r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("5xx: %d; want it delivered, not replayed", r.status)
		}
	}
	wantExecutions(t, srv, 2)
	for range 2 {
		problem(t, srv.do(t, request{key: []string{"panic"}, path: "/orders?panic=1", body: "{}"}), http.StatusInternalServerError, "internal-error")
	}
	wantExecutions(t, srv, 4)
	// 4xx are stored by default.
	srv.do(t, request{key: []string{"four"}, path: "/orders?status=402", body: "{}"})
	if r := srv.do(t, request{key: []string{"four"}, path: "/orders?status=402", body: "{}"}); r.status != 402 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("4xx retry: %d; want a replay", r.status)
	}
	wantExecutions(t, srv, 5)

	stripe := s.serve(t, nil, nethttp.WithStorePolicy(nethttp.StorePolicy{Success: true, Redirection: true, ClientError: true, ServerError: true, Panic: true}))
	for range 2 {
		stripe.do(t, request{key: []string{"five"}, path: "/orders?status=500", body: "{}"})
		stripe.do(t, request{key: []string{"panic"}, path: "/orders?panic=1", body: "{}"})
	}
	wantExecutions(t, stripe, 2)
}

func testClientDisconnectMidRequestRetryReplays(t *testing.T, s *suite) {
	srv := s.serve(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.url+"/orders?sleep=300ms", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "gone")
	errc := make(chan error, 1)
	go func() {
		_, err := srv.client.Do(req)
		errc <- err
	}()
	waitExecutions(t, srv, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the client's request: %v", err)
	}
	// The handler finishes its work although the client left; the retry
	// (which may arrive while it still runs, and then waits) gets its
	// response.
	r := srv.do(t, request{key: []string{"gone"}, path: "/orders?sleep=300ms", body: "{}"})
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %q; want a replay", r.status, r.header.Get("Idempotent-Replayed"))
	}
	wantExecutions(t, srv, 1)
}

func testHandlerThatGivesUpOnDisconnectIsForgotten(t *testing.T, s *suite) {
	srv := s.serve(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.url+"/orders?giveup=1", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "k")
	errc := make(chan error, 1)
	go func() { _, err := srv.client.Do(req); errc <- err }()
	waitExecutions(t, srv, 1)
	cancel() // the handler gives up when its client leaves, answering nothing
	<-errc
	var r response
	for deadline := time.Now().Add(10 * time.Second); ; {
		// The first request's claim is released once its handler returns.
		r = srv.do(t, request{path: "/orders?giveup=1", key: []string{"k"}, body: "{}"})
		if r.status != http.StatusConflict || time.Now().After(deadline) {
			break
		}
	}
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry: %d; want a fresh execution (the abandoned attempt answered nothing)", r.status)
	}
	wantExecutions(t, srv, 2)
}

func testScopesIsolateTenants(t *testing.T, s *suite) {
	srv := s.serve(t, nil, nethttp.WithScope(func(r *http.Request) string { return r.Header.Get("X-Tenant") }))
	a := srv.do(t, request{key: []string{"k"}, body: "{}", header: map[string]string{"X-Tenant": "acme"}})
	b := srv.do(t, request{key: []string{"k"}, body: "{}", header: map[string]string{"X-Tenant": "globex"}})
	if b.header.Get("Idempotent-Replayed") != "" || a.body == b.body {
		t.Fatal("one tenant's key replayed another tenant's response")
	}
	if r := srv.do(t, request{key: []string{"k"}, body: "{}", header: map[string]string{"X-Tenant": "acme"}}); r.body != a.body {
		t.Fatal("a tenant's own retry did not replay")
	}
	wantExecutions(t, srv, 2)
}

// testCompressedResponseReplaysWithItsEncoding: a response compressed
// inside the guard is recorded as the compressed bytes, so its
// Content-Encoding and Vary are replayed with it whatever the allow-list
// says, and a retry that does not accept the coding gets 409
// response-not-replayable, never bytes it cannot decode (and never a
// second execution).
func testCompressedResponseReplaysWithItsEncoding(t *testing.T, s *suite) {
	srv := s.serve(t, nil, nethttp.WithReplayHeaders("Content-Type"))
	req := request{key: []string{"gz"}, path: "/orders?gzip=1", body: `{"a":1}`, header: map[string]string{"Accept-Encoding": "gzip"}}
	first := srv.do(t, req) // an explicit Accept-Encoding: the client does not decompress
	if first.status != http.StatusCreated || first.header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("first: %d, Content-Encoding %q", first.status, first.header.Get("Content-Encoding"))
	}
	for _, accept := range []string{"gzip", "br;q=1, GZIP;q=0.5", "x-gzip", "*", "identity;q=0, *;q=0.1"} {
		req.header["Accept-Encoding"] = accept
		again := srv.do(t, req)
		if !again.replayed() || again.body != first.body || again.header.Get("Content-Encoding") != "gzip" ||
			again.header.Get("Vary") != "Accept-Encoding" {
			t.Fatalf("Accept-Encoding %q: %d replayed=%v Content-Encoding %q Vary %q; want the gzip bytes replayed",
				accept, again.status, again.replayed(), again.header.Get("Content-Encoding"), again.header.Get("Vary"))
		}
		if got := gunzip(t, again.body); !strings.Contains(got, `"order":1`) {
			t.Fatalf("the replayed body decodes to %q", got)
		}
	}
	for _, accept := range []string{"identity", "br", "gzip;q=0", "gzip;q=0.000, *", "*;q=0", "gzip;q=oops"} {
		req.header["Accept-Encoding"] = accept
		problem(t, srv.do(t, req), http.StatusConflict, "response-not-replayable")
	}
	// No Accept-Encoding at all accepts no coding either.
	raw, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.url+"/orders?gzip=1", strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	raw.Header.Set("Idempotency-Key", "gz")
	plain := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(plain.CloseIdleConnections)
	got := send(t, plain, raw)
	problem(t, response{status: got.Status, header: got.Header, body: got.Body}, http.StatusConflict, "response-not-replayable")
	wantExecutions(t, srv, 1)
}

// gunzip decodes a gzip body.
func gunzip(t *testing.T, body string) string {
	t.Helper()
	zr, err := gzip.NewReader(strings.NewReader(body))
	if err != nil {
		t.Fatalf("the body is not gzip: %v", err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("the body is not gzip: %v", err)
	}
	return string(b)
}

// testAbortedResponseIsNotReplayable: a handler that panics with
// http.ErrAbortHandler after it began its answer has run, and what the
// client got is unknown: it is recorded as executed-not-replayable. One that
// aborts before answering anything is forgotten, and a retry runs it again.
func testAbortedResponseIsNotReplayable(t *testing.T, s *suite) {
	srv := s.serve(t, nil)
	late := request{key: []string{"late"}, path: "/orders?abort=late", body: "{}"}
	srv.tryDo(t, late) // the connection is cut: the answer may be an error
	problem(t, srv.do(t, late), http.StatusConflict, "response-not-replayable")
	wantExecutions(t, srv, 1)

	// net/http's client may resend a request with an Idempotency-Key on a
	// cut connection by itself: count at least the two attempts made here.
	early := request{key: []string{"early"}, path: "/orders?abort=early", body: "{}"}
	srv.tryDo(t, early)
	srv.tryDo(t, early)
	if n := srv.app.runs(); n < 3 {
		t.Fatalf("the handler ran %d times; want the early abort run again by its retry", n)
	}
}
