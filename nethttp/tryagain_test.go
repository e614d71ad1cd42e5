package nethttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/httpsuite"
	"github.com/idemkit/idemkit/nethttp"
)

// TestTransportRetryAfter429Succeeds: a handler that answers its first
// request 429 with Retry-After and later ones 201: the Transport's retry,
// with the same key, runs the handler again and gets the 201, where a
// recorded 429 would have answered every retry until the record expired.
func TestTransportRetryAfter429Succeeds(t *testing.T) {
	var runs atomic.Int32
	mw := idem(t, httpsuite.NewGuard(t))
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if runs.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "created")
	})))
	defer srv.Close()
	client := &http.Client{Transport: &nethttp.Transport{Backoff: idemkit.Backoff{Base: time.Millisecond, Max: 10 * time.Millisecond}}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader(`{"amount":1}`))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || string(body) != "created" || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("%d %q replayed=%q; want the retry executed and created", resp.StatusCode, body, resp.Header.Get("Idempotent-Replayed"))
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("the handler ran %d times; want 2", n)
	}
}
