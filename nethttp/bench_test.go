package nethttp_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/idemkit/idemkit/lock/memlock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/memstore"
)

// The benchmarks compare a small JSON POST through a bare handler with the
// same request through the middleware (memory backends): a first execution
// (a new key each time) and a replay (one key). The difference is the
// middleware's overhead.

var benchBody = []byte(`{"customer":"cus_42","amount":1250,"currency":"eur","items":[{"sku":"book","qty":1}]}`)

func benchHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/orders/42")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"order":42,"status":"created"}`))
	})
}

func benchRequest() (*http.Request, *bytes.Reader) {
	body := bytes.NewReader(benchBody)
	r := httptest.NewRequest(http.MethodPost, "/orders", body)
	r.Header.Set("Content-Type", "application/json")
	return r, body
}

// discardWriter is a ResponseWriter that keeps nothing, so the benchmarks
// measure the handlers, not a recorder.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

func (d *discardWriter) reset() {
	for k := range d.h {
		delete(d.h, k)
	}
}

func benchMiddleware(b *testing.B) http.Handler {
	g, err := middleware.New(memstore.New(), memlock.New())
	if err != nil {
		b.Fatal(err)
	}
	c, err := nethttp.NewCore(g, nethttp.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	return c.Middleware()(benchHandler())
}

func BenchmarkBareHandler(b *testing.B) {
	h := benchHandler()
	r, body := benchRequest()
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		body.Reset(benchBody)
		r.Body = io.NopCloser(body)
		w.reset()
		h.ServeHTTP(w, r)
	}
}

func BenchmarkFirstExecution(b *testing.B) {
	h := benchMiddleware(b)
	r, body := benchRequest()
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		body.Reset(benchBody)
		r.Body = io.NopCloser(body)
		r.Header["Idempotency-Key"] = []string{"key-" + strconv.Itoa(i)}
		w.reset()
		h.ServeHTTP(w, r)
	}
}

func BenchmarkReplay(b *testing.B) {
	h := benchMiddleware(b)
	r, body := benchRequest()
	r.Header.Set("Idempotency-Key", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
	w := &discardWriter{h: http.Header{}}
	h.ServeHTTP(w, r) // the first execution
	b.ReportAllocs()
	for b.Loop() {
		body.Reset(benchBody)
		r.Body = io.NopCloser(body)
		w.reset()
		h.ServeHTTP(w, r)
	}
}
