// Command echo serves the demo service on echo with idemkit's echo adapter
// in front of it, with exactly the contract of the nethttp example:
//
//	go run ./echo -addr 127.0.0.1:8080             # memory backend
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
// The same flags choose the backend (-store memory, redis, redis-cluster,
// postgres, firestore). Query parameters make the business handler misbehave on
// purpose: sleep, status, panic, bytes, stream (see package demo). It logs
// with slog and shuts down gracefully on SIGINT and SIGTERM. With -metrics,
// GET /metrics serves the guard's metrics (see package idemkitotel) in the
// Prometheus text format, beside the demo's routes.
package main

import (
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"

	"github.com/idemkit/idemkit/echoadapter"
	"github.com/idemkit/idemkit/examples/internal/cli"
	"github.com/idemkit/idemkit/examples/internal/demo"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

func main() { cli.Main(program()) }

// program is the demo on echo.
func program() cli.Program { return cli.HTTP("echo", routes) }

// routes mounts the demo service on an echo instance: POST /orders guarded
// with a required key, POST /notes guarded with an optional key, GET
// /stats unguarded, all behind the demo's authentication, and the keys
// scoped by principal (see demo.Principal).
func routes(svc *demo.Service, guard *middleware.Guard, logger *slog.Logger) (http.Handler, error) {
	required, err := echoadapter.New(guard, echoadapter.WithHTTPOptions(nethttp.WithLogger(logger), nethttp.WithScope(demo.Scope), nethttp.WithKeyRequired(true)))
	if err != nil {
		return nil, err
	}
	optional, err := echoadapter.New(guard, echoadapter.WithHTTPOptions(nethttp.WithLogger(logger), nethttp.WithScope(demo.Scope)))
	if err != nil {
		return nil, err
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(echomw.RecoverWithConfig(echomw.RecoverConfig{
		LogErrorFunc: func(_ echo.Context, err error, _ []byte) error {
			logger.Error("echo demo: a handler panicked", slog.String("error", err.Error()))
			return err
		},
	}))
	business := echo.WrapHandler(svc.Business())
	e.POST("/orders", business, required)
	e.POST("/notes", business, optional)
	e.GET("/stats", echo.WrapHandler(svc.Stats()))
	return demo.Authenticate(e), nil
}
