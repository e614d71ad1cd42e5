package cli

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

	"github.com/idemkit/idemkit/examples/internal/demo"
	"github.com/idemkit/idemkit/idemkitotel"
	"github.com/idemkit/idemkit/middleware"
)

// ShutdownTimeout bounds a graceful shutdown: the requests or calls still
// running after it are cut.
const ShutdownTimeout = 10 * time.Second

// Server is what a demo program serves. Serve serves ln until Shutdown (it
// may then return nil or [http.ErrServerClosed]) or a failure; Shutdown
// stops the server gracefully, waiting for what is in flight until ctx
// ends. *http.Server is one.
type Server interface {
	Serve(ln net.Listener) error
	Shutdown(ctx context.Context) error
}

var _ Server = (*http.Server)(nil)

// Program is one demo server program: everything but the server is the
// same in every demo (the backend flags, the guard, the listener, the
// logging and the graceful shutdown).
type Program struct {
	// Name names the flag set and the program in its error log line.
	Name string
	// Addr is the default listen address (-addr).
	Addr string
	// Build builds the server on what the flags chose ([Deps]). It also
	// returns a function that reports how many times the business logic
	// ran, which the program logs when it stops.
	Build func(d Deps) (srv Server, executions func() int64, err error)
}

// Deps is what a [Program]'s server is built on.
type Deps struct {
	Guard  *middleware.Guard // the guard on the backend the flags chose
	Logger *slog.Logger
	// Metrics serves the guard's metrics with -metrics, and the server
	// must answer GET /metrics with it on its own address; without, it is
	// nil.
	Metrics http.Handler
	// Faults is -faults: the demo's crash switches are on.
	Faults bool
}

// HTTP returns the Program of an HTTP demo: the demo service
// ([demo.Service]) served by the handler that routes mounts it on, in the
// demos' http.Server ([demo.HTTPServer]); Addr is 127.0.0.1:8080. With
// -metrics, GET /metrics is served beside the routes, outside the demo's
// authentication (a real service puts it behind its own, or on an internal
// port).
func HTTP(name string, routes func(svc *demo.Service, guard *middleware.Guard, logger *slog.Logger) (http.Handler, error)) Program {
	return Program{
		Name: name,
		Addr: "127.0.0.1:8080",
		Build: func(d Deps) (Server, func() int64, error) {
			svc := &demo.Service{Faults: d.Faults}
			h, err := routes(svc, d.Guard, d.Logger)
			if err != nil {
				return nil, nil, err
			}
			if d.Metrics != nil {
				mux := http.NewServeMux()
				mux.Handle("GET /metrics", d.Metrics)
				mux.Handle("/", h)
				h = mux
			}
			return demo.HTTPServer(h), svc.Executions, nil
		},
	}
}

// Main runs p as the process's program: with the command-line arguments,
// logging as text to stderr, until SIGINT or SIGTERM. It exits with status
// 1 if p fails.
func Main(p Program) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	err := p.Run(ctx, os.Args[1:], logger, nil)
	stop()
	if err != nil {
		logger.Error(p.Name+" demo", slog.String("error", err.Error()))
		os.Exit(1)
	}
}

// Run parses args (the backend flags of [Flags], -addr, -metrics and
// -faults), builds the guard (observed by the idemkitotel hook with
// -metrics) and the server, and serves until ctx ends; then it shuts the server down
// gracefully (within [ShutdownTimeout]) and closes the backend. If ready is
// not nil, it receives the address the server listens on.
func (p Program) Run(ctx context.Context, args []string, logger *slog.Logger, ready chan<- string) error {
	fs := flag.NewFlagSet(p.Name, flag.ContinueOnError)
	var f Flags
	f.Register(fs, p.Addr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	var (
		hook    *idemkitotel.Hook
		metrics http.Handler
	)
	if f.Metrics {
		m, err := NewMetrics("idemkit-demo-" + p.Name)
		if err != nil {
			return err
		}
		defer func() { _ = m.Shutdown(context.Background()) }()
		hook, metrics = m.Hook, m.Handler
	}
	guard, closeBackends, err := f.Guard(ctx, logger, hook)
	if err != nil {
		return err
	}
	defer closeBackends()
	srv, executions, err := p.Build(Deps{Guard: guard, Logger: logger, Metrics: metrics, Faults: f.Faults})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.Addr)
	if err != nil {
		return err
	}
	logger.Info("serving the demo", slog.String("addr", ln.Addr().String()), slog.String("store", f.Store), slog.Bool("metrics", f.Metrics))
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
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	logger.Info("stopped", slog.Int64("executions", executions()))
	return nil
}
