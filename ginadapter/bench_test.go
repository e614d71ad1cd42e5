package ginadapter_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idemkit/ginadapter"
	"github.com/idemkit/idemkit/lock/memlock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/memstore"
)

// The benchmarks compare a small JSON POST through a bare gin engine with
// the same request through the adapter (memory backends, as in nethttp's
// benchmarks): a first execution (a new key each time) and a replay (one
// key). The difference is the adapter's overhead, nethttp's core included.

var benchBody = []byte(`{"customer":"cus_42","amount":1250,"currency":"eur","items":[{"sku":"book","qty":1}]}`)

var benchAnswer = []byte(`{"order":42,"status":"created"}`)

func benchEngine(b *testing.B, guarded bool) *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	handlers := []gin.HandlerFunc{func(c *gin.Context) {
		_, _ = io.Copy(io.Discard, c.Request.Body)
		c.Header("Location", "/orders/42")
		c.Data(http.StatusCreated, "application/json", benchAnswer)
	}}
	if guarded {
		l := memlock.New()
		g, err := middleware.New(memstore.New(memstore.WithLocker(l)), l)
		if err != nil {
			b.Fatal(err)
		}
		idem, err := ginadapter.New(g, nethttp.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			b.Fatal(err)
		}
		handlers = append([]gin.HandlerFunc{idem}, handlers...)
	}
	r.POST("/orders", handlers...)
	return r
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

func BenchmarkBareGin(b *testing.B) {
	h := benchEngine(b, false)
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
	h := benchEngine(b, true)
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
	h := benchEngine(b, true)
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
