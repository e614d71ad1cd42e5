package httpsuite

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/memstore"
)

// BenchStack builds the handler that [Bench] drives in process (no
// listener, no client): app mounted at POST /orders on the adapter's
// framework, behind the adapter's middleware built on guard with opts —
// or, when guard is nil, without the middleware (the bare framework, the
// baseline).
type BenchStack func(b *testing.B, guard *middleware.Guard, opts []nethttp.Option, app http.Handler) http.Handler

// Bench benchmarks stack with a small JSON POST /orders whose handler
// answers 201 Created with a Location and a small JSON body, on the memory
// backend (memstore), in three sub-benchmarks:
//
//	bare    the stack without the middleware: the baseline
//	first   a first execution: a new key on every request
//	replay  a replay: one key, executed once before the timer starts
//
// The difference between bare and the others is the middleware's
// overhead, the adapter's included. Allocations are reported; responses go
// to a ResponseWriter that keeps nothing, so the figures measure the
// handlers, not a recorder. The middleware logs to a discarding logger.
//
//	func BenchmarkGin(b *testing.B) { httpsuite.Bench(b, ginBenchStack) }
func Bench(b *testing.B, stack BenchStack) {
	b.Run("bare", func(b *testing.B) {
		benchLoop(b, stack(b, nil, nil, benchApp()), newBenchRequest(), nil)
	})
	b.Run("first", func(b *testing.B) {
		i := 0
		benchLoop(b, benchGuarded(b, stack), newBenchRequest(), func(r *http.Request) {
			i++
			r.Header["Idempotency-Key"] = []string{"key-" + strconv.Itoa(i)}
		})
	})
	b.Run("replay", func(b *testing.B) {
		h := benchGuarded(b, stack)
		req := newBenchRequest()
		req.r.Header.Set("Idempotency-Key", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
		h.ServeHTTP(&discardWriter{h: http.Header{}}, req.r) // the first execution
		benchLoop(b, h, req, nil)
	})
}

// benchApp is the benchmarks' business handler.
func benchApp() http.Handler {
	answer := []byte(`{"order":42,"status":"created"}`)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/orders/42")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(answer)
	})
}

// benchGuarded builds stack behind the middleware on a fresh memory
// backend.
func benchGuarded(b *testing.B, stack BenchStack) http.Handler {
	g, err := middleware.New(memstore.New())
	if err != nil {
		b.Fatal(err)
	}
	return stack(b, g, []nethttp.Option{nethttp.WithLogger(slog.New(slog.DiscardHandler))}, benchApp())
}

// benchRequest is the benchmarks' request, sent again and again: its body
// is rewound before each.
type benchRequest struct {
	r       *http.Request
	payload []byte
	body    *bytes.Reader
}

func newBenchRequest() benchRequest {
	payload := []byte(`{"customer":"cus_42","amount":1250,"currency":"eur","items":[{"sku":"book","qty":1}]}`)
	body := bytes.NewReader(payload)
	r := httptest.NewRequest(http.MethodPost, "/orders", body)
	r.Header.Set("Content-Type", "application/json")
	return benchRequest{r: r, payload: payload, body: body}
}

// benchLoop serves req with h once per iteration; each, if not nil,
// prepares the request before it is served.
func benchLoop(b *testing.B, h http.Handler, req benchRequest, each func(*http.Request)) {
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		if each != nil {
			each(req.r)
		}
		req.body.Reset(req.payload)
		req.r.Body = io.NopCloser(req.body)
		clear(w.h)
		h.ServeHTTP(w, req.r)
	}
}

// discardWriter is a ResponseWriter that keeps nothing.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
