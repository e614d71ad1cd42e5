// Command nethttp serves the demo service on net/http with idemkit in front
// of it:
//
//	go run ./nethttp -addr 127.0.0.1:8080              # memory backend
//
//	POST /orders   guarded, Idempotency-Key required
//	POST /notes    guarded, Idempotency-Key optional
//	GET  /stats    {"executions": n}
//
// Requests may carry Authorization: Bearer alice-1 (or Bearer alice-2,
// Alice after a token refresh) or Bearer bob-1; other credentials are
// refused with 401, and a request without any is the anonymous caller.
// Idempotency keys are scoped by caller (see demo.Principal): Bob's
// request with Alice's key runs as his own, never answered with hers.
//
// Query parameters make the business handler misbehave on purpose: sleep,
// status, panic, bytes, stream (see package demo). It logs with slog and
// shuts down gracefully on SIGINT and SIGTERM.
//
// With -metrics, GET /metrics serves the guard's metrics (see package
// idemkitotel) in the Prometheus text format, beside the demo's routes:
//
//	go run ./nethttp -metrics
//	curl http://127.0.0.1:8080/metrics
package main

import (
	"log/slog"
	"net/http"

	"github.com/idemkit/idemkit/examples/internal/cli"
	"github.com/idemkit/idemkit/examples/internal/demo"
	"github.com/idemkit/idemkit/middleware"
)

func main() { cli.Main(program()) }

// program is the demo on net/http.
func program() cli.Program {
	return cli.HTTP("nethttp", func(svc *demo.Service, guard *middleware.Guard, _ *slog.Logger) (http.Handler, error) {
		return demo.NetHTTP(svc, guard)
	})
}
