// Command gin serves the demo service on gin with idemkit's gin adapter in
// front of it, with exactly the contract of the nethttp example:
//
//	go run ./gin -addr 127.0.0.1:8080              # memory backend
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
	"io"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idemkit/examples/internal/cli"
	"github.com/idemkit/idemkit/examples/internal/demo"
	"github.com/idemkit/idemkit/ginadapter"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

func main() { cli.Main(program()) }

// program is the demo on gin.
func program() cli.Program { return cli.HTTP("gin", routes) }

// routes mounts the demo service on a gin engine: POST /orders guarded
// with a required key, POST /notes guarded with an optional key, GET
// /stats unguarded, all behind the demo's authentication, and the keys
// scoped by principal (see demo.Principal).
func routes(svc *demo.Service, guard *middleware.Guard, logger *slog.Logger) (http.Handler, error) {
	required, err := ginadapter.New(guard, nethttp.WithLogger(logger), nethttp.WithScope(demo.Scope), nethttp.WithKeyRequired(true))
	if err != nil {
		return nil, err
	}
	optional, err := ginadapter.New(guard, nethttp.WithLogger(logger), nethttp.WithScope(demo.Scope))
	if err != nil {
		return nil, err
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true // 405 for GET /orders, as net/http's mux answers
	r.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, p any) {
		logger.Error("gin demo: a handler panicked", slog.Any("panic", p))
		c.AbortWithStatus(http.StatusInternalServerError)
	}))
	business := gin.WrapH(svc.Business())
	r.POST("/orders", required, business)
	r.POST("/notes", optional, business)
	r.GET("/stats", gin.WrapH(svc.Stats()))
	return demo.Authenticate(r), nil
}
