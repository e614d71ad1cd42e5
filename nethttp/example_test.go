package nethttp_test

import (
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
