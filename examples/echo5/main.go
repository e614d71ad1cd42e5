// Command echo5 serves the demo service on echo v5 with idemkit's echo v5
// adapter in front of it, with exactly the contract of the nethttp example:
//
//	go run ./echo5 -addr 127.0.0.1:8080            # memory backend
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
	"errors"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v5"
	echomw "github.com/labstack/echo/v5/middleware"

	"github.com/idemkit/idemkit/echo5adapter"
	"github.com/idemkit/idemkit/examples/internal/cli"
	"github.com/idemkit/idemkit/examples/internal/demo"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

func main() { cli.Main(program()) }

// program is the demo on echo v5.
func program() cli.Program { return cli.HTTP("echo5", routes) }

// routes mounts the demo service on an echo v5 instance: POST /orders
// guarded with a required key, POST /notes guarded with an optional key,
// GET /stats unguarded, all behind the demo's authentication, and the keys
// scoped by principal (see demo.Principal).
func routes(svc *demo.Service, guard *middleware.Guard, logger *slog.Logger) (http.Handler, error) {
	required, err := echo5adapter.New(guard, echo5adapter.WithHTTPOptions(nethttp.WithLogger(logger), nethttp.WithScope(demo.Scope), nethttp.WithKeyRequired(true)))
	if err != nil {
		return nil, err
	}
	optional, err := echo5adapter.New(guard, echo5adapter.WithHTTPOptions(nethttp.WithLogger(logger), nethttp.WithScope(demo.Scope)))
	if err != nil {
		return nil, err
	}
	e := echo.New()
	e.Logger = logger
	// echo v5's Recover hands a panic to the error handler as an error
	// (a panic inside the guard is answered by the adapter, which logs it).
	defaultErrors := echo.DefaultHTTPErrorHandler(false)
	e.HTTPErrorHandler = func(c *echo.Context, err error) {
		if p := (*echomw.PanicStackError)(nil); errors.As(err, &p) {
			logger.Error("echo5 demo: a handler panicked", slog.String("error", p.Err.Error()))
		}
		defaultErrors(c, err)
	}
	e.Use(echomw.Recover())
	business := echo.WrapHandler(svc.Business())
	e.POST("/orders", business, required)
	e.POST("/notes", business, optional)
	e.GET("/stats", echo.WrapHandler(svc.Stats()))
	return demo.Authenticate(e), nil
}
