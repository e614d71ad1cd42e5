package ginadapter_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idemkit/ginadapter"
	"github.com/idemkit/idemkit/internal/httpsuite"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// BenchmarkGin compares a small JSON POST through a bare gin engine with
// the same request through the adapter (the memory backend, as in nethttp's
// benchmarks): a first execution (a new key each time) and a replay (one
// key). The difference is the adapter's overhead, nethttp's core included.
// See httpsuite.Bench.
func BenchmarkGin(b *testing.B) {
	httpsuite.Bench(b, func(b *testing.B, g *middleware.Guard, opts []nethttp.Option, app http.Handler) http.Handler {
		gin.SetMode(gin.ReleaseMode)
		r := gin.New()
		handlers := []gin.HandlerFunc{gin.WrapH(app)}
		if g != nil {
			idem, err := ginadapter.New(g, opts...)
			if err != nil {
				b.Fatal(err)
			}
			handlers = append([]gin.HandlerFunc{idem}, handlers...)
		}
		r.POST("/orders", handlers...)
		return r
	})
}
