package nethttp_test

import (
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit/internal/httpsuite"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// netHTTPStack serves the suite's app behind nethttp.New's middleware,
// mounted on a ServeMux at "/" (so the operation is "POST /").
func netHTTPStack(t *testing.T, g *middleware.Guard, opts []nethttp.Option, app http.Handler) http.Handler {
	opts = append([]nethttp.Option{nethttp.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	mux := http.NewServeMux()
	mux.Handle("/", idem(t, g, opts...)(app))
	return mux
}

// idem returns nethttp.New's middleware for g with opts; it fails t if
// they are invalid.
func idem(t *testing.T, g *middleware.Guard, opts ...nethttp.Option) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := nethttp.New(g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// TestBehaviourTable runs the HTTP behaviour suite (every row of the HTTP table,
// through a real server and client) on the memory backend, and on memory
// records composed with memory locks.
func TestBehaviourTable(t *testing.T) {
	t.Run("memory", func(t *testing.T) { httpsuite.Run(t, netHTTPStack) })
	t.Run("composed", func(t *testing.T) {
		httpsuite.RunWith(t, netHTTPStack, httpsuite.Composed)
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

// created answers 201 Created with a JSON body.
var created = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"order":1}`)
})

func TestCORSExposure(t *testing.T) {
	mw := idem(t, httpsuite.NewGuard(t))
	cors := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Access-Control-Allow-Origin", "https://app.example")
			w.Header().Set("Access-Control-Expose-Headers", "Location")
			next.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(cors(mw(created)))
	defer srv.Close()
	send(t, srv.URL, "k")
	again := send(t, srv.URL, "k")
	exposed := strings.Join(again.Header.Values("Access-Control-Expose-Headers"), ",")
	if !strings.Contains(exposed, "Idempotent-Replayed") || !strings.Contains(exposed, "Location") {
		t.Fatalf("Access-Control-Expose-Headers %q; want Location and Idempotent-Replayed", exposed)
	}
}

func TestPathsUnderOnePatternAreDifferentRoutes(t *testing.T) {
	mw := idem(t, httpsuite.NewGuard(t))
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}", mw(created))
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

func TestNewRefusesMisconfigurationNamingTheFix(t *testing.T) {
	httpsuite.CheckMisconfigurationsRefused(t, func(g *middleware.Guard, opts ...nethttp.Option) error {
		mw, err := nethttp.New(g, opts...)
		if (mw == nil) != (err != nil) {
			t.Fatalf("New gave middleware %v with error %v", mw != nil, err)
		}
		return err
	})
}

// decompress is a request-decompressing middleware of the usual kind: it
// swaps a gzip body for a reader of its content and leaves ContentLength
// at the compressed size.
func decompress(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, "bad gzip header", http.StatusBadRequest)
				return
			}
			r.Body = zr
			r.Header.Del("Content-Encoding")
		}
		next.ServeHTTP(w, r)
	})
}

// TestRequestDecompressedInFront: a decompressing middleware in front of
// the guard leaves ContentLength stale; the core reads the body through its
// limit regardless.
func TestRequestDecompressedInFront(t *testing.T) {
	g := httpsuite.NewGuard(t)
	echoBody := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(w, r.Body)
	})
	url := httpsuite.Serve(t, decompress(idem(t, g)(echoBody)))
	httpsuite.CheckRequestDecompressedInFront(t, url)
}

// failingBody fails every read, as a torn request body does.
type failingBody struct{}

func (failingBody) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }
func (failingBody) Close() error             { return nil }

// TestUnreadableBody: a body that cannot be read is a 400
// request-body-unreadable (not a malformed key); one stopped by an
// http.MaxBytesReader in front is a 413. Neither runs the handler.
func TestUnreadableBody(t *testing.T) {
	var runs int
	h := idem(t, httpsuite.NewGuard(t))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs++ }))
	for _, c := range []struct {
		name   string
		body   func(w http.ResponseWriter) io.ReadCloser
		status int
		kind   string
	}{
		{"torn", func(http.ResponseWriter) io.ReadCloser { return failingBody{} }, http.StatusBadRequest, "request-body-unreadable"},
		{"MaxBytesReader", func(w http.ResponseWriter) io.ReadCloser {
			return http.MaxBytesReader(w, io.NopCloser(strings.NewReader(strings.Repeat("x", 100))), 10)
		}, http.StatusRequestEntityTooLarge, "request-body-too-large"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/orders", nil)
			req.Body, req.ContentLength = c.body(rec), -1
			req.Header.Set("Idempotency-Key", c.name)
			h.ServeHTTP(rec, req)
			httpsuite.WantProblem(t, httpsuite.Reply{Status: rec.Code, Header: rec.Header(), Body: rec.Body.String()}, c.status, c.kind)
		})
	}
	if runs != 0 {
		t.Fatalf("the handler ran %d times", runs)
	}
}

// unwrapper wraps a writer the way middleware between the guard and the
// handler does, with Unwrap for http.ResponseController.
type unwrapper struct{ http.ResponseWriter }

func (u unwrapper) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// TestMarkNotReplayable: a response marked by the handler (directly or
// through a wrapping writer) is delivered once and recorded as
// executed-not-replayable: the retry gets 409 response-not-replayable and
// the handler does not run again. On a writer the middleware did not make
// it does nothing.
func TestMarkNotReplayable(t *testing.T) {
	for _, wrap := range []bool{false, true} {
		var runs atomic.Int32
		h := idem(t, httpsuite.NewGuard(t))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			runs.Add(1)
			if wrap {
				w = unwrapper{w}
			}
			nethttp.MarkNotReplayable(w)
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "a one-time secret")
		}))
		url := httpsuite.Serve(t, h)
		if first := httpsuite.Post(t, url, "k", "{}"); first.Status != http.StatusCreated || first.Body != "a one-time secret" {
			t.Fatalf("wrapped %v: first answer %d %q", wrap, first.Status, first.Body)
		}
		httpsuite.WantProblem(t, httpsuite.Post(t, url, "k", "{}"), http.StatusConflict, "response-not-replayable")
		if n := runs.Load(); n != 1 {
			t.Fatalf("wrapped %v: the handler ran %d times", wrap, n)
		}
	}
	rec := httptest.NewRecorder()
	nethttp.MarkNotReplayable(rec) // not guarded: nothing to mark
	if rec.Code != http.StatusOK || rec.Body.Len() != 0 {
		t.Fatal("MarkNotReplayable wrote to an unguarded writer")
	}
}

// TestOperationFromPattern: the middleware wrapped around each handler of
// a ServeMux names the operation by the pattern that matched, with the
// method in front (the pattern's, or the request's when the pattern has
// none); nethttp.WithOperation overrides it.
func TestOperationFromPattern(t *testing.T) {
	for _, pattern := range []string{"POST /orders/{id}", "/orders/{id}"} {
		t.Run(pattern, func(t *testing.T) {
			httpsuite.CheckOperations(t, func(t *testing.T, g *middleware.Guard, opts []nethttp.Option, h http.Handler) http.Handler {
				mux := http.NewServeMux()
				mux.Handle(pattern, idem(t, g, opts...)(h))
				return mux
			}, "POST /orders/{id}")
		})
	}
}

// TestOperationAroundTheMux: a middleware around the whole ServeMux runs
// before the mux matched a pattern: the operation is unknown ("").
func TestOperationAroundTheMux(t *testing.T) {
	ops := make(chan string, 4)
	g := httpsuite.NewGuard(t, middleware.WithHook(middleware.HookFunc(func(_ context.Context, e middleware.Event) {
		if e.Kind.Outcome() {
			ops <- e.Operation
		}
	})))
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}", created)
	url := httpsuite.Serve(t, idem(t, g)(mux))
	if got := httpsuite.Post(t, url+"/orders/1", "k", "{}"); got.Status != http.StatusCreated {
		t.Fatalf("status %d", got.Status)
	}
	// The outcome is reported before the handler returns, so before the
	// answer is complete.
	select {
	case op := <-ops:
		if op != "" {
			t.Fatalf("operation %q; want none", op)
		}
	default:
		t.Fatal("no outcome reported")
	}
}
