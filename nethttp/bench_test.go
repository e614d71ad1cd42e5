package nethttp_test

import (
	"net/http"
	"testing"

	"github.com/idemkit/idemkit/internal/httpsuite"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// BenchmarkNetHTTP compares a small JSON POST through a bare handler with
// the same request through the middleware (memory backend): a first
// execution (a new key each time) and a replay (one key). The difference
// is the middleware's overhead. See httpsuite.Bench.
func BenchmarkNetHTTP(b *testing.B) {
	httpsuite.Bench(b, func(b *testing.B, g *middleware.Guard, opts []nethttp.Option, app http.Handler) http.Handler {
		if g == nil {
			return app
		}
		mw, err := nethttp.New(g, opts...)
		if err != nil {
			b.Fatal(err)
		}
		return mw(app)
	})
}
