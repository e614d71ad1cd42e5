package echoadapter

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"

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

// WithSkipper sets a function that skips the middleware for a request: it
// goes on to the next handler unguarded. Default: echo's DefaultSkipper
// (nothing skipped); nil restores it.
func WithSkipper(skip echomw.Skipper) Option { return func(c *config) { c.skipper = skip } }

// WithHTTPOptions sets options of the HTTP core (see [nethttp.Option]);
// repeated calls add up. Default: none, that is nethttp's defaults: POST
// and PATCH guarded, the key optional, a 1 MiB body limit, 2xx–4xx
// recorded and 5xx forgotten, one scope for the whole service, the path
// as sent (escapes kept) as the route; and the operation that hooks and telemetry see is
// echo's: the method and the route echo matched, "POST /orders/:id"
// (c.Path()), unless nethttp.WithOperation says otherwise.
func WithHTTPOptions(opts ...nethttp.Option) Option {
	return func(c *config) { c.http = append(c.http, opts...) }
}

// WithErrorHandler, when true, makes the middleware return its refusals
// (400, 409, 413, 422, 503) as errors, so that echo's HTTPErrorHandler
// renders them in the application's own error format, and middleware in
// front sees them as it sees a handler's error. Each is an *echo.HTTPError
// with the problem's status, whose Internal error is a [*ProblemError]
// holding the [nethttp.Problem] (errors.As finds both); its Message is the
// problem as RFC 9457 JSON, so echo's default error handler answers
// with the status and the problem's fields. Cache-Control: no-store and,
// for 409 in progress and 503, Retry-After are set on the response before
// the error is returned. The 500 of a handler that panicked is rendered
// the same way, through the error handler, inside the guard (so the
// record, if the store policy keeps it, holds what the client got). It
// replaces any [nethttp.WithProblemWriter]. Default: false (the middleware
// writes RFC 9457 application/problem+json answers itself, or through
// nethttp.WithProblemWriter).
func WithErrorHandler(on bool) Option { return func(c *config) { c.errorHandler = on } }

// ProblemError is a refusal of the middleware, returned to echo's error
// handling under [WithErrorHandler] as the Internal error of an
// *echo.HTTPError.
type ProblemError struct {
	Problem nethttp.Problem
}

// Error returns the problem's title and detail.
func (e *ProblemError) Error() string {
	if e.Problem.Detail == "" {
		return "idempotency: " + e.Problem.Title
	}
	return "idempotency: " + e.Problem.Title + ": " + e.Problem.Detail
}

// StatusCode returns the problem's HTTP status.
func (e *ProblemError) StatusCode() int { return e.Problem.Status }

// problemMessage is a problem as the Message of an *echo.HTTPError: it
// marshals to RFC 9457 JSON.
type problemMessage nethttp.Problem

// MarshalJSON implements json.Marshaler.
func (m problemMessage) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail,omitempty"`
	}{m.Type, m.Title, m.Status, m.Detail})
}

// problemError returns p as the error the middleware returns to echo.
func problemError(p nethttp.Problem) error {
	return &echo.HTTPError{Code: p.Status, Message: problemMessage(p), Internal: &ProblemError{Problem: p}}
}

// New validates the options and returns echo middleware that makes the
// handlers after it idempotent with guard. An invalid or nil option, or a
// guard not made by middleware.New (nil or zero), is an error here
// (InvalidArgument); nothing panics on the request path.
func New(guard *middleware.Guard, opts ...Option) (echo.MiddlewareFunc, error) {
	var cfg config
	for _, o := range opts {
		if o == nil {
			return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "echoadapter", "an option is nil; remove it, or pass the option it was meant to be", nil)
		}
		o(&cfg)
	}
	// echo's route is the default operation; the user's options come
	// after it, and the error handler's problem writer after them.
	httpOpts := append([]nethttp.Option{nethttp.WithOperation(operation)}, cfg.http...)
	if cfg.errorHandler {
		httpOpts = append(httpOpts, nethttp.WithProblemWriter(returnProblem))
	}
	mw, err := nethttp.New(guard, httpOpts...)
	if err != nil {
		return nil, err
	}
	skip := cfg.skipper
	if skip == nil {
		skip = echomw.DefaultSkipper
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runChain(w, r, next) }))
		return func(c echo.Context) error {
			if skip(c) {
				// Reported as passed through under echo's route: a
				// WithOperation names only the requests nethttp sees.
				op := ""
				if c.Path() != "" {
					op = c.Request().Method + " " + c.Path()
				}
				guard.Bypass(c.Request().Context(), middleware.EventPassedThrough, nil, middleware.Operation(op))
				return next(c)
			}
			return serve(h, c)
		}
	}, nil
}

// state is one request the middleware serves, in its context.
type state struct {
	c       echo.Context
	outer   *echo.Response // the response the middleware was given
	refusal error          // a refusal to return
	passErr error          // the chain's error, when it ran unguarded
}

// serve runs one request through the nethttp middleware h, whose next
// handler (runChain) runs the rest of the echo chain at most once per key.
// A refusal kept by returnProblem (WithErrorHandler) is returned.
func serve(h http.Handler, c echo.Context) error {
	outerR := c.Request()
	st := &state{c: c, outer: c.Response()}
	defer c.SetRequest(outerR)
	h.ServeHTTP(st.outer, outerR.WithContext(context.WithValue(outerR.Context(), contextKey{}, st)))
	if st.refusal != nil {
		return st.refusal
	}
	return st.passErr
}

// runChain runs the rest of the echo chain for the nethttp middleware.
func runChain(w http.ResponseWriter, r *http.Request, next echo.HandlerFunc) {
	st := contextOf(r)
	c := st.c
	c.SetRequest(r)
	if rw, ok := w.(*echo.Response); ok && rw == st.outer {
		// Passed through unguarded: echo's own writer and error flow.
		st.passErr = next(c)
		return
	}
	inner := echo.NewResponse(w, c.Echo())
	inner.Status = st.outer.Status
	c.SetResponse(inner)
	defer c.SetResponse(st.outer)
	if err := next(c); err != nil {
		// Rendered into the capture, so the record holds what the client
		// got; not returned, so it is rendered once.
		c.Error(err)
	}
}

// contextOf returns the state of a request the middleware serves, or nil.
func contextOf(r *http.Request) *state {
	st, _ := r.Context().Value(contextKey{}).(*state)
	return st
}

// operation names a request's operation by the route echo matched: "POST
// /orders/:id", or "" when it is unknown.
func operation(r *http.Request) string {
	st := contextOf(r)
	if st == nil || st.c.Path() == "" {
		return ""
	}
	return r.Method + " " + st.c.Path()
}

// returnProblem is the problem writer of WithErrorHandler: a refusal, to
// be written on the response the middleware was given, is kept for serve
// to return; the 500 of a panic, written inside the guard, is rendered
// there by echo's error handler, on a response over the capture.
func returnProblem(w http.ResponseWriter, r *http.Request, p nethttp.Problem) {
	st := contextOf(r)
	if rw, ok := w.(*echo.Response); ok && rw == st.outer {
		st.refusal = problemError(p)
		return
	}
	c := st.c
	prev := c.Response()
	c.SetResponse(echo.NewResponse(w, c.Echo()))
	defer c.SetResponse(prev)
	c.Error(problemError(p))
}

// contextKey keys the echo.Context in the request's context.
type contextKey struct{}

// ContextOf returns the echo.Context of a request the middleware serves,
// or nil for a request it did not see. It is meant for the nethttp hooks,
// which receive the *http.Request: [nethttp.WithScope],
// [nethttp.WithRoute], [nethttp.WithOperation], [nethttp.WithKey] (with
// [nethttp.FuncKey]), [nethttp.WithProblemWriter] and
// [nethttp.WithFingerprint] can read what echo
// holds (values an authentication middleware stored with c.Set, path
// parameters). Like the echo.Context itself (echo reuses it for another
// request), it is valid only while the request is being served.
func ContextOf(r *http.Request) echo.Context {
	if st := contextOf(r); st != nil {
		return st.c
	}
	return nil
}
