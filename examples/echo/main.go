// Command echo serves the demo service on echo with idemkit's echo adapter
// in front of it, with exactly the contract of the nethttp example:
//
//	go run ./echo -addr 127.0.0.1:8080             # memory backends
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
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"

	"github.com/idemkit/idemkit/echoadapter"
	"github.com/idemkit/idemkit/examples/internal/demo"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, os.Args[1:], logger, nil); err != nil {
		logger.Error("echo demo", slog.String("error", err.Error()))
		os.Exit(1)
	}
}

// run serves until ctx ends. If ready is not nil, it receives the address
// the server listens on.
func run(ctx context.Context, args []string, logger *slog.Logger, ready chan<- string) error {
	fs := flag.NewFlagSet("echo", flag.ContinueOnError)
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

// routes mounts the demo service on an echo instance: POST /orders guarded
// with a required key, POST /notes guarded with an optional key, GET
// /stats unguarded.
func routes(svc *demo.Service, guard *middleware.Guard, logger *slog.Logger) (*echo.Echo, error) {
	required, err := echoadapter.Middleware(guard, echoadapter.Config{
		Options: []nethttp.Option{nethttp.WithLogger(logger), nethttp.WithKeyRequired(true)},
	})
	if err != nil {
		return nil, err
	}
	optional, err := echoadapter.Middleware(guard, echoadapter.Config{
		Options: []nethttp.Option{nethttp.WithLogger(logger)},
	})
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
	return e, nil
}
