package echo5adapter_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/idemkit/idemkit/echo5adapter"
	"github.com/idemkit/idemkit/internal/httpsuite"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// BenchmarkEcho5 compares a small JSON POST through a bare echo v5
// instance with the same request through the adapter (the memory backend,
// as in nethttp's benchmarks): a first execution (a new key each time) and
// a replay (one key). The difference is the adapter's overhead, nethttp's
// core included. See httpsuite.Bench.
func BenchmarkEcho5(b *testing.B) {
	httpsuite.Bench(b, func(b *testing.B, g *middleware.Guard, opts []nethttp.Option, app http.Handler) http.Handler {
		e := echo.New()
		var mws []echo.MiddlewareFunc
		if g != nil {
			idem, err := echo5adapter.New(g, echo5adapter.WithHTTPOptions(opts...))
			if err != nil {
				b.Fatal(err)
			}
			mws = append(mws, idem)
		}
		e.POST("/orders", echo.WrapHandler(app), mws...)
		return e
	})
}
