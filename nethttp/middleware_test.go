package nethttp_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/lock/memlock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/nethttp/httpsuite"
	"github.com/idemkit/idemkit/store/memstore"
)

// netHTTPStack serves the suite's app behind nethttp.Middleware on a real
// loopback listener.
func netHTTPStack(t *testing.T, g *middleware.Guard, opts []nethttp.Option, app http.Handler) string {
	opts = append([]nethttp.Option{nethttp.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	core, err := nethttp.NewCore(g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(core.Middleware()(app))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestBehaviour runs the HTTP behaviour suite (every row of the HTTP table,
// through a real server and client) on memory backends that combine their
// round trips, and on plain ones.
func TestBehaviour(t *testing.T) {
	t.Run("combined", func(t *testing.T) { httpsuite.Run(t, netHTTPStack) })
	t.Run("plain", func(t *testing.T) {
		httpsuite.RunWith(t, netHTTPStack, func(t *testing.T) httpsuite.Backends {
			s := memstore.New()
			return httpsuite.Backends{Store: s, Locker: memlock.New(), Break: func() { _ = s.Close() }}
		})
	})
}

func send(t *testing.T, url, key string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestCORSExposure(t *testing.T) {
	g, _ := middleware.New(memstore.New(), memlock.New())
	mw := nethttp.Middleware(g)
	cors := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Access-Control-Allow-Origin", "https://app.example")
			w.Header().Set("Access-Control-Expose-Headers", "Location")
			next.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(cors(mw(&httpsuite.App{})))
	defer srv.Close()
	send(t, srv.URL, "k")
	again := send(t, srv.URL, "k")
	exposed := strings.Join(again.Header.Values("Access-Control-Expose-Headers"), ",")
	if !strings.Contains(exposed, "Idempotent-Replayed") || !strings.Contains(exposed, "Location") {
		t.Fatalf("Access-Control-Expose-Headers %q; want Location and Idempotent-Replayed", exposed)
	}
}

func TestPathsUnderOnePatternAreDifferentRoutes(t *testing.T) {
	g, _ := middleware.New(memstore.New(), memlock.New())
	mw := nethttp.Middleware(g)
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}", mw(&httpsuite.App{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	send(t, srv.URL+"/orders/1", "k")
	// Paying order 2 with order 1's key is a mismatch, never order 1's
	// receipt.
	if r := send(t, srv.URL+"/orders/2", "k"); r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("another path under the same pattern: %d; want 422", r.StatusCode)
	}
	if r := send(t, srv.URL+"/orders/1", "k"); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same path: %d; want a replay", r.StatusCode)
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
