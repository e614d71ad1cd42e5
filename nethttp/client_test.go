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
