package echo5adapter

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v5"
	echomw "github.com/labstack/echo/v5/middleware"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// Option configures [New].
type Option func(*config)

type config struct {
	skipper      echomw.Skipper
	http         []nethttp.Option
	errorHandler bool
}

// WithSkipper sets a function that skips the middleware for a request,
// which goes on unguarded. Default: echo's DefaultSkipper; nil restores it.
func WithSkipper(skip echomw.Skipper) Option { return func(c *config) { c.skipper = skip } }

// WithHTTPOptions sets nethttp's options, with nethttp's defaults except
// the operation (echo's route); repeated calls add up.
func WithHTTPOptions(opts ...nethttp.Option) Option {
	return func(c *config) { c.http = append(c.http, opts...) }
}

// WithErrorHandler, when true, returns the middleware's refusals as
// errors for echo's HTTPErrorHandler to render, as it renders a handler's.
// The error carries the problem's status (echo.StatusCode), unwraps to the
// nethttp.Problem (errors.As), marshals to the RFC 9457 problem (what
// echo.DefaultHTTPErrorHandler writes) and is an echo.ProblemErrorer (what
// echo.ProblemDetailsHTTPErrorHandler writes, as application/problem+json).
// A panic's 500 is rendered the same way, inside the guard. It replaces
// nethttp.WithProblemWriter. Default: false.
func WithErrorHandler(on bool) Option { return func(c *config) { c.errorHandler = on } }

// problemError is a problem as the error the middleware returns to echo.
type problemError struct{ p nethttp.Problem }

func (e *problemError) Error() string { return e.p.Error() }

// StatusCode makes it an echo.HTTPStatusCoder.
func (e *problemError) StatusCode() int { return e.p.Status }

// Unwrap gives errors.As the nethttp.Problem.
func (e *problemError) Unwrap() error { return e.p }

// ProblemError makes it an echo.ProblemErrorer.
func (e *problemError) ProblemError() *echo.ProblemError {
	return &echo.ProblemError{Type: e.p.Type, Title: e.p.Title, Status: e.p.Status, Detail: e.p.Detail}
}

// MarshalJSON writes the RFC 9457 problem, for echo's default error
// handler, which writes a json.Marshaler error as it marshals.
func (e *problemError) MarshalJSON() ([]byte, error) { return json.Marshal(e.ProblemError()) }

// New validates the options and returns echo middleware that makes the
// handlers after it idempotent with guard. A bad or nil option, or a guard
// not made by middleware.New, is an InvalidArgument error here.
func New(guard *middleware.Guard, opts ...Option) (echo.MiddlewareFunc, error) {
	cfg := config{skipper: echomw.DefaultSkipper}
	for _, o := range opts {
		if o == nil {
			return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "echo5adapter", "an option is nil; remove it, or pass the option it was meant to be", nil)
		}
		o(&cfg)
	}
	httpOpts := make([]nethttp.Option, 0, len(cfg.http)+2)
	httpOpts = append(httpOpts, nethttp.WithOperation(operation))
	httpOpts = append(httpOpts, cfg.http...)
	if cfg.errorHandler {
		httpOpts = append(httpOpts, nethttp.WithProblemWriter(returnProblem))
	}
	mw, err := nethttp.New(guard, httpOpts...)
	if err != nil {
		return nil, err
	}
	if cfg.skipper == nil {
		cfg.skipper = echomw.DefaultSkipper
	}
	skip := cfg.skipper
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runChain(w, r, next) }))
		return func(c *echo.Context) error {
			if !skip(c) {
				return serve(h, c)
			}
			// Reported as passed through under echo's route: a
			// WithOperation names only the requests nethttp sees.
			guard.Bypass(c.Request().Context(), middleware.EventPassedThrough, nil, middleware.Operation(route(c)))
			return next(c)
		}
	}, nil
}

// state is one request the middleware serves, in its context.
type state struct {
	c       *echo.Context
	outer   http.ResponseWriter // the response the middleware was given
	sent    *http.Request       // the request handed to nethttp
	refusal error               // a refusal to return
	passErr error               // the chain's error, when it ran unguarded
}

// serve runs one request through the nethttp middleware h, whose next
// handler (runChain) runs the rest of the echo chain at most once per key.
// A refusal kept by returnProblem (WithErrorHandler) is returned.
func serve(h http.Handler, c *echo.Context) error {
	outerR := c.Request()
	defer c.SetRequest(outerR)
	st := &state{c: c, outer: c.Response()}
	st.sent = outerR.WithContext(context.WithValue(outerR.Context(), contextKey{}, st))
	h.ServeHTTP(st.outer, st.sent)
	if st.refusal != nil {
		return st.refusal
	}
	return st.passErr
}

// unguarded reports whether nethttp handed r on unguarded, or answers it
// itself outside the guard: it then passes the very request it got, where
// a guarded run gets a request of its own (see nethttp.New).
func (st *state) unguarded(r *http.Request) bool { return r == st.sent }

// runChain runs the rest of the echo chain for the nethttp middleware.
func runChain(w http.ResponseWriter, r *http.Request, next echo.HandlerFunc) {
	st := contextOf(r)
	c := st.c
	c.SetRequest(r)
	if st.unguarded(r) {
		// echo's own writer and error flow.
		st.passErr = next(c)
		return
	}
	// The chain writes to a Response of its own over the capture, so
	// that echo's error handler and the handlers see what was written
	// inside the guard (Committed, Status), never the outer Response's.
	inner := echo.NewResponse(w, c.Logger())
	if outer, err := echo.UnwrapResponse(st.outer); err == nil {
		inner.Status = outer.Status
	}
	c.SetResponse(inner)
	defer c.SetResponse(st.outer)
	if err := next(c); err != nil {
		// Rendered into the capture, so the record holds what the client
		// got; not returned, so it is rendered once.
		renderError(c, err)
	}
}

// renderError renders err with echo's error handler.
func renderError(c *echo.Context, err error) {
	if e := c.Echo(); e != nil && e.HTTPErrorHandler != nil {
		e.HTTPErrorHandler(c, err)
		return
	}
	echo.DefaultHTTPErrorHandler(false)(c, err)
}

// contextOf returns the state of a request the middleware serves, or nil.
func contextOf(r *http.Request) *state {
	st, _ := r.Context().Value(contextKey{}).(*state)
	return st
}

// route names a request's operation by the route echo matched: "POST
// /orders/:id", or "" when it is unknown.
func route(c *echo.Context) string {
	if c.Path() == "" {
		return ""
	}
	return c.Request().Method + " " + c.Path()
}

// operation is route for nethttp.WithOperation.
func operation(r *http.Request) string {
	if st := contextOf(r); st != nil {
		return route(st.c)
	}
	return ""
}

// returnProblem is the problem writer of WithErrorHandler: a refusal,
// written outside the guard, is kept for serve to return; the 500 of a
// panic, written inside the guard, is rendered there by echo's error
// handler, on a Response over the capture.
func returnProblem(w http.ResponseWriter, r *http.Request, p nethttp.Problem) {
	st := contextOf(r)
	switch {
	case st == nil: // not reached: serve puts it in every request
		nethttp.WriteProblem(w, r, p)
	case st.unguarded(r):
		st.refusal = &problemError{p}
	default:
		c := st.c
		prev := c.Response()
		c.SetResponse(echo.NewResponse(w, c.Logger()))
		defer c.SetResponse(prev)
		renderError(c, &problemError{p})
	}
}

// contextKey keys the request's state in its context.
type contextKey struct{}

// ContextOf returns the *echo.Context of a request the middleware serves,
// or nil for one it did not see, for the nethttp hooks, which get the
// *http.Request. Like the *echo.Context, it is valid only while the
// request is served.
func ContextOf(r *http.Request) *echo.Context {
	if st := contextOf(r); st != nil {
		return st.c
	}
	return nil
}
