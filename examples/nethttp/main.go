// Command nethttp serves the demo service on net/http with idemkit in front
// of it:
//
//	go run ./nethttp -addr 127.0.0.1:8080              # memory backend
//
//	POST /orders   guarded, Idempotency-Key required
//	POST /notes    guarded, Idempotency-Key optional
//	GET  /stats    {"executions": n}
//
// Query parameters make the business handler misbehave on purpose: sleep,
// status, panic, bytes, stream (see package demo). It logs with slog and
// shuts down gracefully on SIGINT and SIGTERM.
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
