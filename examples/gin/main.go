// Command gin serves the demo service on gin with idemkit's gin adapter in
// front of it, with exactly the contract of the nethttp example:
//
//	go run ./gin -addr 127.0.0.1:8080              # memory backends
//
//	POST /orders   guarded, Idempotency-Key required
//	POST /notes    guarded, Idempotency-Key optional
//	GET  /stats    {"executions": n}
//
// The same flags choose the backends (-store memory, redis, redis-cluster,
// postgres). Query parameters make the business handler misbehave on
// purpose: sleep, status, panic, bytes, stream (see package demo). It logs
// with slog and shuts down gracefully on SIGINT and SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idemkit/examples/internal/demo"
	"github.com/idemkit/idemkit/ginadapter"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, os.Args[1:], logger, nil); err != nil {
		logger.Error("gin demo", slog.String("error", err.Error()))
		os.Exit(1)
	}
}

// run serves until ctx ends. If ready is not nil, it receives the address
// the server listens on.
func run(ctx context.Context, args []string, logger *slog.Logger, ready chan<- string) error {
	fs := flag.NewFlagSet("gin", flag.ContinueOnError)
	var f demo.Flags
	f.Register(fs, "127.0.0.1:8080")
	if err := fs.Parse(args); err != nil {
		return err
	}
	guard, closeBackends, err := f.Guard(ctx, logger)
	if err != nil {
		return err
	}
	defer closeBackends()
	svc := &demo.Service{}
	handler, err := routes(svc, guard, logger)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.Addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	logger.Info("serving the demo", slog.String("addr", ln.Addr().String()), slog.String("store", f.Store))
	if ready != nil {
		ready <- ln.Addr().String()
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	logger.Info("stopped", slog.Int64("executions", svc.Executions()))
	return nil
}

// routes mounts the demo service on a gin engine: POST /orders guarded
// with a required key, POST /notes guarded with an optional key, GET
// /stats unguarded.
func routes(svc *demo.Service, guard *middleware.Guard, logger *slog.Logger) (*gin.Engine, error) {
	required, err := ginadapter.New(guard, nethttp.WithLogger(logger), nethttp.WithKeyRequired(true))
	if err != nil {
		return nil, err
	}
	optional, err := ginadapter.New(guard, nethttp.WithLogger(logger))
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
	return r, nil
}
