package nethttp_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/httpsuite"
	"github.com/idemkit/idemkit/nethttp"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// keyLog records the keys a server saw.
type keyLog struct {
	mu   sync.Mutex
	keys []string
}

func (k *keyLog) add(r *http.Request) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys = append(k.keys, r.Header.Get("Idempotency-Key"))
}

func (k *keyLog) all() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.keys...)
}

// fastTransport retries quickly, so tests do not wait.
func fastTransport() *nethttp.Transport {
	return &nethttp.Transport{Backoff: idemkit.Backoff{Base: time.Millisecond, Max: 2 * time.Second}}
}

func post(t *testing.T, c *http.Client, url, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestTransportAddsKeyAndRetriesWithIt(t *testing.T) {
	var log keyLog
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		body, _ := io.ReadAll(r.Body)
		if calls.Add(1) <= 2 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	c := &http.Client{Transport: fastTransport()}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader(`{"a":1}`))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || string(body) != `{"a":1}` {
		t.Fatalf("final answer %d %q; want 201 with the body sent again", resp.StatusCode, body)
	}
	keys := log.all()
	if len(keys) != 3 || !uuidV4.MatchString(keys[0]) || keys[1] != keys[0] || keys[2] != keys[0] {
		t.Fatalf("keys per attempt %q; want one fresh UUID on all three", keys)
	}
	if req.Header.Get("Idempotency-Key") != "" {
		t.Fatal("the transport modified the caller's request")
	}
}

func TestTransportKeepsAGivenKeyAndLeavesOtherMethods(t *testing.T) {
	var log keyLog
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { log.add(r) }))
	defer srv.Close()
	c := &http.Client{Transport: fastTransport()}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPatch, srv.URL, strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", `"mine"`)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	get, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	resp, err = c.Do(get)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if keys := log.all(); len(keys) != 2 || keys[0] != `"mine"` || keys[1] != "" {
		t.Fatalf("keys %q; want the caller's key kept and none added to GET", keys)
	}
}

func TestTransportWhatItDoesNotRetry(t *testing.T) {
	var calls atomic.Int32
	status := make(chan func(http.ResponseWriter), 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		(<-status)(w)
	}))
	defer srv.Close()
	c := &http.Client{Transport: fastTransport()}
	for name, answer := range map[string]func(http.ResponseWriter){
		"409 without Retry-After (not replayable)": func(w http.ResponseWriter) { w.WriteHeader(http.StatusConflict) },
		"503 with a Retry-After past Backoff.Max":  func(w http.ResponseWriter) { w.Header().Set("Retry-After", "3600"); w.WriteHeader(503) },
		"422 mismatch": func(w http.ResponseWriter) { w.WriteHeader(http.StatusUnprocessableEntity) },
		"500":          func(w http.ResponseWriter) { w.WriteHeader(http.StatusInternalServerError) },
	} {
		calls.Store(0)
		status <- answer
		resp, _ := post(t, c, srv.URL, "x")
		if calls.Load() != 1 {
			t.Fatalf("%s: %d attempts (status %d); want 1", name, calls.Load(), resp.StatusCode)
		}
	}
	// A body that cannot be sent again is sent once.
	calls.Store(0)
	status <- func(w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) }
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, io.MultiReader(strings.NewReader("once")))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if calls.Load() != 1 || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("an unreplayable body: %d attempts, status %d", calls.Load(), resp.StatusCode)
	}
}

func TestTransportStopsWhenContextEnds(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c := &http.Client{Transport: &nethttp.Transport{MaxAttempts: 100, Backoff: idemkit.Backoff{Max: time.Hour}}}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("x"))
	_, err := c.Do(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do: %v; want the ctx's deadline while waiting to retry", err)
	}
}

// TestLostResponseRetriedSafely is the point of it all: the server runs the
// handler, then the connection breaks before the answer arrives; the
// transport retries with the same key, and the guarded server replays the
// first answer instead of running the handler again.
func TestLostResponseRetriedSafely(t *testing.T) {
	g := httpsuite.NewGuard(t)
	var executions atomic.Int32
	business := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := executions.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "order "+string(rune('0'+n)))
	})
	guarded := idem(t, g, nethttp.WithKeyRequired(true), nethttp.WithLogger(slog.New(slog.DiscardHandler)))(business)
	var attempts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if attempts.Add(1) == 1 {
			// Run the request for real, then lose the answer.
			guarded.ServeHTTP(httptest.NewRecorder(), r)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		guarded.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c := &http.Client{Transport: fastTransport()}
	resp, body := post(t, c, srv.URL, `{"item":"book"}`)
	if resp.StatusCode != http.StatusCreated || body != "order 1" || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("answer %d %q replayed=%q; want the first execution's answer, replayed", resp.StatusCode, body, resp.Header.Get("Idempotent-Replayed"))
	}
	if executions.Load() != 1 || attempts.Load() != 2 {
		t.Fatalf("%d executions over %d attempts; want 1 over 2", executions.Load(), attempts.Load())
	}
}

// TestTransportWaitsOutInProgress: a duplicate refused with 409 and
// Retry-After is retried after that delay and gets the replay.
func TestTransportWaitsOutInProgress(t *testing.T) {
	g := httpsuite.NewGuard(t)
	var executions atomic.Int32
	business := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		executions.Add(1)
		time.Sleep(300 * time.Millisecond)
		w.WriteHeader(http.StatusCreated)
	})
	srv := httptest.NewServer(idem(t, g, nethttp.WithWaitForResult(false), nethttp.WithRetryAfter(time.Second),
		nethttp.WithLogger(slog.New(slog.DiscardHandler)))(business))
	defer srv.Close()
	const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	for executions.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	c := &http.Client{Transport: fastTransport()}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the duplicate: %d replayed=%q; want the replay after waiting", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
	}
	if <-first != http.StatusCreated || executions.Load() != 1 {
		t.Fatalf("%d executions", executions.Load())
	}
}

// slowOrders serves a guarded handler that takes 600 ms (longer than the
// timeouts below) on a real listener. It counts the handler's executions and
// logs the key of every attempt that reaches the server.
type slowOrders struct {
	url        string
	executions atomic.Int32
	bodies     keyLog // the bodies the handler received, in the key slot
	keys       keyLog
}

func newSlowOrders(t *testing.T, opts ...nethttp.Option) *slowOrders {
	t.Helper()
	s := &slowOrders{}
	business := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.executions.Add(1)
		body, _ := io.ReadAll(r.Body)
		s.bodies.mu.Lock()
		s.bodies.keys = append(s.bodies.keys, string(body))
		s.bodies.mu.Unlock()
		time.Sleep(600 * time.Millisecond) // ignores its context, as much real work does
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "order "+string(rune('0'+n)))
	})
	opts = append([]nethttp.Option{nethttp.WithKeyRequired(true), nethttp.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	guarded := idem(t, httpsuite.NewGuard(t), opts...)(business)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.keys.add(r)
		guarded.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// sameKey reports whether every attempt the server saw carried key.
func (s *slowOrders) sameKey(key string) bool {
	keys := s.keys.all()
	for _, k := range keys {
		if k != key {
			return false
		}
	}
	return len(keys) > 0
}

// TestTransportRetriesASlowAttemptWithTheSameKey: an attempt that has no
// answer within AttemptTimeout is abandoned and sent again with the same key
// and body; the server holds the new attempt as a duplicate of the first (it
// waits for the result, or answers 409 with Retry-After and the Transport
// tries again) and replays the first execution's answer. The handler runs
// once, and the caller gets its answer.
func TestTransportRetriesASlowAttemptWithTheSameKey(t *testing.T) {
	for name, opts := range map[string][]nethttp.Option{
		"the duplicate waits for the result": nil,
		"the duplicate gets 409 and retries": {nethttp.WithWaitForResult(false)},
	} {
		t.Run(name, func(t *testing.T) {
			s := newSlowOrders(t, opts...)
			tr := fastTransport()
			tr.AttemptTimeout = 150 * time.Millisecond
			c := &http.Client{Transport: tr}
			resp, body := post(t, c, s.url, `{"item":"book"}`)
			if resp.StatusCode != http.StatusCreated || body != "order 1" || resp.Header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("answer %d %q replayed=%q; want the first execution's answer, replayed to a later attempt",
					resp.StatusCode, body, resp.Header.Get("Idempotent-Replayed"))
			}
			keys := s.keys.all()
			if s.executions.Load() != 1 || len(keys) < 2 || !uuidV4.MatchString(keys[0]) || !s.sameKey(keys[0]) {
				t.Fatalf("%d executions over attempts with keys %q; want 1 over several attempts, all with one key",
					s.executions.Load(), keys)
			}
			if b := s.bodies.all(); len(b) != 1 || b[0] != `{"item":"book"}` {
				t.Fatalf("the handler received %q", b)
			}
		})
	}
}

// TestTransportKeyReachableAfterTheCallersDeadline: when the caller's own
// deadline ends the call while the handler is still running, the caller has
// the key that was sent — from Transport.SetKey, or from the KeyError the
// error unwraps to — and its retry with that key is answered from the first
// execution instead of running the handler again.
func TestTransportKeyReachableAfterTheCallersDeadline(t *testing.T) {
	retry := func(t *testing.T, s *slowOrders, key string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url, strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Idempotency-Key", key)
		resp, err := (&http.Client{Transport: fastTransport()}).Do(req)
		if err != nil {
			t.Fatalf("the caller's retry: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || string(body) != "order 1" || resp.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the caller's retry: %d %q replayed=%q; want the first execution's answer",
				resp.StatusCode, body, resp.Header.Get("Idempotent-Replayed"))
		}
		if s.executions.Load() != 1 || !s.sameKey(key) {
			t.Fatalf("%d executions, keys %q; want 1 execution, every attempt with %q", s.executions.Load(), s.keys.all(), key)
		}
	}

	t.Run("Client.Timeout, key set before sending", func(t *testing.T) {
		s := newSlowOrders(t)
		tr := fastTransport()
		c := &http.Client{Transport: tr, Timeout: 300 * time.Millisecond}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url, strings.NewReader(`{"item":"book"}`))
		key := tr.SetKey(req)
		if !uuidV4.MatchString(key) || req.Header.Get("Idempotency-Key") != key || tr.SetKey(req) != key {
			t.Fatalf("SetKey gave %q, the request carries %q; want one fresh UUID, kept", key, req.Header.Get("Idempotency-Key"))
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("Do: %d; want Client.Timeout's error while the handler runs", resp.StatusCode)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do: %v; want a timeout", err)
		}
		retry(t, s, key)
	})

	t.Run("context deadline with attempt timeouts, key from the error", func(t *testing.T) {
		s := newSlowOrders(t)
		tr := fastTransport()
		tr.AttemptTimeout = 100 * time.Millisecond // no attempt outlives the caller's deadline
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url, strings.NewReader(`{"item":"book"}`))
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("Do: %d; want the context's deadline while the handler runs", resp.StatusCode)
		}
		var ke *nethttp.KeyError
		if !errors.As(err, &ke) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do: %v; want a KeyError wrapping the deadline", err)
		}
		if !uuidV4.MatchString(ke.Key) || req.Header.Get("Idempotency-Key") != "" {
			t.Fatalf("KeyError.Key %q, caller's header %q; want the Transport's UUID, the caller's request untouched",
				ke.Key, req.Header.Get("Idempotency-Key"))
		}
		retry(t, s, ke.Key)
	})
}

// TestTransportErrorCarriesTheKey: attempts that end in connection errors
// return a KeyError with the key every attempt carried.
func TestTransportErrorCarriesTheKey(t *testing.T) {
	var log keyLog
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	tr := fastTransport()
	tr.MaxAttempts = 2
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader("x"))
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("Do succeeded; want the connection error")
	}
	var ke *nethttp.KeyError
	keys := log.all()
	if !errors.As(err, &ke) || len(keys) != 2 || ke.Key != keys[0] || keys[1] != keys[0] {
		t.Fatalf("Do: %v, keys sent %q; want a KeyError with the key of both attempts", err, keys)
	}
}

// TestTransportDoesNotCutAnAttemptItCannotRetry: the last attempt, and the
// only attempt of a body that cannot be sent again, wait for their answer
// past AttemptTimeout: cutting them would only turn the answer into an
// error.
func TestTransportDoesNotCutAnAttemptItCannotRetry(t *testing.T) {
	for name, c := range map[string]struct {
		maxAttempts int
		body        func() io.Reader
	}{
		"a body without GetBody": {0, func() io.Reader { return io.MultiReader(strings.NewReader(`{"item":"book"}`)) }},
		"MaxAttempts 1":          {1, func() io.Reader { return strings.NewReader(`{"item":"book"}`) }},
	} {
		t.Run(name, func(t *testing.T) {
			s := newSlowOrders(t)
			tr := fastTransport()
			tr.MaxAttempts = c.maxAttempts
			tr.AttemptTimeout = 100 * time.Millisecond
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url, c.body())
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				t.Fatalf("Do: %v; want the slow answer", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated || string(body) != "order 1" || len(s.keys.all()) != 1 || s.executions.Load() != 1 {
				t.Fatalf("answer %d %q after %d attempts, %d executions; want order 1 from one attempt",
					resp.StatusCode, body, len(s.keys.all()), s.executions.Load())
			}
		})
	}
}

// TestTransportAttemptTimeoutEndsAtTheHeaders: AttemptTimeout limits the
// wait for an answer's headers, not the reading of its body, which the
// caller's deadline alone bounds.
func TestTransportAttemptTimeoutEndsAtTheHeaders(t *testing.T) {
	var attempts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		w.WriteHeader(http.StatusCreated)
		_ = http.NewResponseController(w).Flush()
		time.Sleep(300 * time.Millisecond)
		_, _ = io.WriteString(w, "done")
	}))
	defer srv.Close()
	tr := fastTransport()
	tr.AttemptTimeout = 100 * time.Millisecond
	resp, body := post(t, &http.Client{Transport: tr}, srv.URL, "x")
	if resp.StatusCode != http.StatusCreated || body != "done" || attempts.Load() != 1 {
		t.Fatalf("answer %d %q after %d attempts; want the whole body of the first", resp.StatusCode, body, attempts.Load())
	}
}
