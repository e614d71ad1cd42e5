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

// WithSkipper sets a function that skips the middleware for a request,
// which goes on unguarded. Default: echo's DefaultSkipper; nil restores it.
func WithSkipper(skip echomw.Skipper) Option { return func(c *config) { c.skipper = skip } }

// WithHTTPOptions sets nethttp's options, with nethttp's defaults except
// the operation (echo's route); repeated calls add up.
func WithHTTPOptions(opts ...nethttp.Option) Option {
	return func(c *config) { c.http = append(c.http, opts...) }
}

// WithErrorHandler, when true, returns the middleware's refusals as
// errors for echo's HTTPErrorHandler to render, as it renders a handler's:
// an *echo.HTTPError with the problem's status, whose Internal is the
// nethttp.Problem and whose Message marshals to the RFC 9457 problem. A
// panic's 500 is rendered the same way, inside the guard. It replaces
// nethttp.WithProblemWriter. Default: false.
func WithErrorHandler(on bool) Option { return func(c *config) { c.errorHandler = on } }

// problemMessage is a problem as the Message of an *echo.HTTPError: it
// marshals to RFC 9457 JSON.
type problemMessage nethttp.Problem

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
	return &echo.HTTPError{Code: p.Status, Message: problemMessage(p), Internal: p}
}

// New validates the options and returns echo middleware that makes the
// handlers after it idempotent with guard. A bad or nil option, or a guard
// not made by middleware.New, is an InvalidArgument error here.
func New(guard *middleware.Guard, opts ...Option) (echo.MiddlewareFunc, error) {
	var cfg config
	for _, o := range opts {
		if o == nil {
			return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "echoadapter", "an option is nil; remove it, or pass the option it was meant to be", nil)
		}
		o(&cfg)
	}
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
	if st == nil { // not reached: serve puts it in every request
		nethttp.WriteProblem(w, r, p)
		return
	}
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

// contextKey keys the request's state in its context.
type contextKey struct{}

// ContextOf returns the echo.Context of a request the middleware serves,
// or nil for one it did not see, for the nethttp hooks, which get the
// *http.Request. Like the echo.Context, it is valid only while the request
// is served.
func ContextOf(r *http.Request) echo.Context {
	if st := contextOf(r); st != nil {
		return st.c
	}
	return nil
}
