package nethttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/memstore"
)

// A retried POST with the same Idempotency-Key gets the first response
// back; the handler runs once. The memory backend serves one process;
// Redis, PostgreSQL or Firestore share the guarantee between processes.
func Example() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := nethttp.New(guard, nethttp.WithKeyRequired(true))
	if err != nil {
		panic(err)
	}

	orders := 0
	mux := http.NewServeMux()
	mux.Handle("POST /orders", idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, orders)
	})))

	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		fmt.Printf("%d replayed=%q %s\n", w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
	}
	fmt.Println("executions:", orders)
	// Output:
	// 201 replayed="" {"order":1}
	// 201 replayed="true" {"order":1}
	// executions: 1
}

// The client side: the Transport gives a POST a key and retries it with
// that key, here after a 503, so the server can tell the retry from a new
// request.
func ExampleTransport() {
	var attempts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if attempts.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "created")
	}))
	defer srv.Close()

	client := &http.Client{Transport: &nethttp.Transport{
		MaxAttempts: 3,
		Backoff:     idemkit.Backoff{Base: 10 * time.Millisecond, Max: time.Second},
	}}
	resp, err := client.Post(srv.URL, "application/json", strings.NewReader(`{"item":"book"}`))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body), "after", attempts.Load(), "attempts")
	// Output: 201 created after 2 attempts
}

// The safe pattern for a caller with a deadline of its own: hold the key
// from the start with SetKey, and after an error (here Client.Timeout, while
// the handler is still at work) send the request again with that key, never
// a new one. The retry is answered from the first execution. AttemptTimeout
// sends an attempt that has no answer in time again inside the Transport,
// with the same key. (The times are short so that the example runs fast.)
func ExampleTransport_SetKey() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := nethttp.New(guard, nethttp.WithKeyRequired(true))
	if err != nil {
		panic(err)
	}
	var executions atomic.Int32
	mux := http.NewServeMux()
	mux.Handle("POST /orders", idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := executions.Add(1)
		time.Sleep(300 * time.Millisecond) // slower than the client's timeout
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", n)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	transport := &nethttp.Transport{
		AttemptTimeout: 100 * time.Millisecond,
		Backoff:        idemkit.Backoff{Base: 10 * time.Millisecond, Max: time.Second},
	}
	client := &http.Client{Transport: transport, Timeout: 200 * time.Millisecond}

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"item":"book"}`))
	if err != nil {
		panic(err)
	}
	transport.SetKey(req) // the key is the caller's, before anything is sent
	resp, err := client.Do(req)
	fmt.Println("first call timed out:", errors.Is(err, context.DeadlineExceeded))
	for tries := 1; err != nil && tries < 10; tries++ {
		// The order may or may not exist: send it again with the same key.
		retry := req.Clone(context.Background()) // keeps the key
		if retry.Body, err = req.GetBody(); err != nil {
			panic(err)
		}
		resp, err = client.Do(retry)
	}
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d replayed=%q %s\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), body)
	fmt.Println("executions:", executions.Load())
	// Output:
	// first call timed out: true
	// 201 replayed="true" order 1
	// executions: 1
}

// A response that must never be sent twice (here a one-time download
// token) is delivered once and marked not replayable: the retry gets 409
// response-not-replayable, and the handler does not run again.
func ExampleMarkNotReplayable() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := nethttp.New(guard)
	if err != nil {
		panic(err)
	}
	tokens := 0
	h := idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tokens++
		nethttp.MarkNotReplayable(w)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "token %d", tokens)
	}))
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/tokens", nil)
		req.Header.Set("Idempotency-Key", "k1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code == http.StatusConflict {
			fmt.Println(w.Code, w.Header().Get("Content-Type"))
			continue
		}
		fmt.Println(w.Code, w.Body)
	}
	fmt.Println("tokens issued:", tokens)
	// Output:
	// 201 token 1
	// 409 application/problem+json
	// tokens issued: 1
}

// The middleware wraps each handler it guards: mounted per route on a
// ServeMux, it names the operation after the route's pattern ("POST
// /orders") for hooks and telemetry. Options tune it; here a key is
// required, so a POST without one is refused with an RFC 9457 problem.
func ExampleNew() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := nethttp.New(guard, nethttp.WithKeyRequired(true), nethttp.WithMaxBodyBytes(64<<10))
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))

	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`)))
	fmt.Println(w.Code, w.Header().Get("Content-Type"))
	fmt.Print(w.Body)
	// Output:
	// 400 application/problem+json
	// {"type":"urn:idemkit:problem:idempotency-key-missing","title":"Idempotency-Key is required","status":400,"detail":"send an Idempotency-Key header with a unique key, such as a UUID"}
}

// An access log in front of the middleware reads each request's
// idempotency outcome from the request's context, with the operation it
// belongs to: executed, replayed, refused (mismatch), or passed through
// (no key).
func Example_accessLog() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := nethttp.New(guard)
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))

	accessLog := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, outcome := middleware.WatchOutcome(r.Context())
			next.ServeHTTP(w, r.WithContext(ctx))
			if e, ok := outcome(); ok {
				fmt.Printf("%s %s idempotency=%s operation=%q\n", r.Method, r.URL.Path, e.Kind, e.Operation)
			}
		})
	}
	h := accessLog(mux)
	for _, r := range []struct{ key, body string }{
		{"k1", `{"item":"book"}`},
		{"k1", `{"item":"book"}`},
		{"k1", `{"item":"pen"}`},
		{"", `{"item":"pen"}`},
	} {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(r.body))
		if r.key != "" {
			req.Header.Set("Idempotency-Key", r.key)
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	// Output:
	// POST /orders idempotency=executed operation="POST /orders"
	// POST /orders idempotency=replayed operation="POST /orders"
	// POST /orders idempotency=mismatch operation="POST /orders"
	// POST /orders idempotency=passed-through operation="POST /orders"
}

// A key can come from elsewhere than a header: here from the
// "idempotency_key" field of a JSON body. A request without the field
// passes through with its body intact.
func ExampleJSONKey() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := nethttp.New(guard, nethttp.WithKey(nethttp.JSONKey("idempotency_key")))
	if err != nil {
		panic(err)
	}
	payments := 0
	h := idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		payments++
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "payment %d of %s", payments, body)
	}))
	for _, body := range []string{
		`{"idempotency_key":"pay-1","amount":5}`,
		`{"amount":5,"idempotency_key":"pay-1"}`,
		`{"amount":7}`,
	} {
		req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json") // compared as JSON: field order does not matter
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		fmt.Printf("replayed=%q %s\n", w.Header().Get("Idempotent-Replayed"), w.Body)
	}
	// Output:
	// replayed="" payment 1 of {"idempotency_key":"pay-1","amount":5}
	// replayed="true" payment 1 of {"idempotency_key":"pay-1","amount":5}
	// replayed="" payment 2 of {"amount":7}
}

// The middleware's own answers can take the application's error format:
// here an envelope, with the problem's kind as the error code.
func ExampleWithProblemWriter() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	envelope := func(w http.ResponseWriter, _ *http.Request, p nethttp.Problem) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(p.Status)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"error": map[string]string{"type": "idempotency_error", "code": p.Kind, "message": p.Detail},
		})
	}
	idem, err := nethttp.New(guard, nethttp.WithProblemWriter(envelope))
	if err != nil {
		panic(err)
	}
	h := idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	for _, body := range []string{`{"amount":5}`, `{"amount":6}`} {
		req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "pay-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusCreated {
			fmt.Println(w.Code, w.Header().Get("Cache-Control"), strings.TrimSpace(w.Body.String()))
			continue
		}
		fmt.Println(w.Code)
	}
	// Output:
	// 201
	// 422 no-store {"error":{"code":"idempotency-key-reused","message":"this key was used with a different request (method, route, query or body); use a new key for a new request","type":"idempotency_error"}}
}

type principalKey struct{}

// A scope hook names the principal a key belongs to, here the one an
// authentication middleware in front found for the request's token. Alice's
// retry after a token refresh still replays her order; Bob, sending the same
// key, gets an order of his own, never Alice's response.
func ExampleWithScope() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := nethttp.New(guard, nethttp.WithScope(func(r *http.Request) string {
		principal, _ := r.Context().Value(principalKey{}).(string)
		return principal
	}))
	if err != nil {
		panic(err)
	}
	orders := 0
	guarded := idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d for %s", orders, r.Context().Value(principalKey{}))
	}))
	tokens := map[string]string{"Bearer alice-1": "alice", "Bearer alice-2": "alice", "Bearer bob-1": "bob"}
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			principal, ok := tokens[r.Header.Get("Authorization")]
			if !ok {
				http.Error(w, "unauthenticated", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, principal)))
		})
	}
	h := authenticate(guarded)
	for _, token := range []string{"Bearer alice-1", "Bearer alice-2", "Bearer bob-1"} {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Authorization", token)
		req.Header.Set("Idempotency-Key", "order-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		fmt.Printf("%s: %d replayed=%q %s\n", token, w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
	}
	// Output:
	// Bearer alice-1: 201 replayed="" order 1 for alice
	// Bearer alice-2: 201 replayed="true" order 1 for alice
	// Bearer bob-1: 201 replayed="" order 2 for bob
}

// The client Transport and the middleware together: the server runs the
// first request, then its answer is lost with the connection. The Transport
// retries with the same key, and the guarded server replays the first
// answer instead of running the handler again.
func ExampleTransport_lostAnswer() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := nethttp.New(guard, nethttp.WithKeyRequired(true))
	if err != nil {
		panic(err)
	}
	var executions atomic.Int32
	guarded := idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", executions.Add(1))
	}))
	var attempts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if attempts.Add(1) == 1 {
			guarded.ServeHTTP(httptest.NewRecorder(), r) // the order is made...
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close() // ...and its answer lost
			}
			return
		}
		guarded.ServeHTTP(w, r)
	}))
	defer srv.Close()

	client := &http.Client{Transport: &nethttp.Transport{
		Backoff: idemkit.Backoff{Base: 10 * time.Millisecond, Max: 100 * time.Millisecond},
	}}
	resp, err := client.Post(srv.URL+"/orders", "application/json", strings.NewReader(`{"item":"book"}`))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d replayed=%q %s\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), body)
	fmt.Println("attempts:", attempts.Load(), "executions:", executions.Load())
	// Output:
	// 201 replayed="true" order 1
	// attempts: 2 executions: 1
}

// An operator's tool shows a recorded response: the guard's Inspect reads
// the record, DecodeResponse turns its response into status, headers and
// body.
func ExampleDecodeResponse() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := nethttp.New(guard)
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"order":42}`)
	})))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"item":"book"}`))
	req.Header.Set("Idempotency-Key", `"k1"`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()

	in, found, err := guard.Inspect(context.Background(), "", "k1", true)
	if err != nil || !found {
		panic(fmt.Sprint(found, err))
	}
	status, header, body, err := nethttp.DecodeResponse(in.Response)
	if err != nil {
		panic(err)
	}
	fmt.Println(in.State, status, header.Get("Content-Type"), string(body))
	// Output: completed 201 application/json {"order":42}
}
