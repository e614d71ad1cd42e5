package echoadapter

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// Option configures [New].
type Option func(*config)

type config struct {
	skipper echomw.Skipper
	http    []nethttp.Option
}

// WithSkipper sets a function that skips the middleware for a request: it
// goes on to the next handler unguarded. Default: echo's DefaultSkipper
// (nothing skipped); nil restores it.
func WithSkipper(skip echomw.Skipper) Option { return func(c *config) { c.skipper = skip } }

// WithHTTPOptions sets options of the HTTP core (see [nethttp.Option]);
// repeated calls add up. Default: none, that is nethttp's defaults: POST
// and PATCH guarded, the key optional, a 1 MiB body limit, 2xx–4xx
// recorded and 5xx forgotten, one scope for the whole service, the URL
// path as the route.
func WithHTTPOptions(opts ...nethttp.Option) Option {
	return func(c *config) { c.http = append(c.http, opts...) }
}

// New validates the options and returns echo middleware that makes the
// handlers after it idempotent with guard. An invalid option, or a nil
// guard, is an error here (InvalidArgument); nothing panics on the request
// path.
func New(guard *middleware.Guard, opts ...Option) (echo.MiddlewareFunc, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	core, err := nethttp.NewCore(guard, cfg.http...)
	if err != nil {
		return nil, err
	}
	skip := cfg.skipper
	if skip == nil {
		skip = echomw.DefaultSkipper
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if skip(c) {
				return next(c)
			}
			return serve(core, c, next)
		}
	}, nil
}

// serve runs one request through the core. The rest of the echo chain is
// the core's next: it runs at most once per key, inside the guard.
func serve(core *nethttp.Core, c echo.Context, next echo.HandlerFunc) error {
	res, outerR := c.Response(), c.Request()
	r := outerR.WithContext(context.WithValue(outerR.Context(), contextKey{}, c))
	defer c.SetRequest(outerR)
	var passErr error
	core.Serve(res, r, func(w http.ResponseWriter, r *http.Request) {
		c.SetRequest(r)
		if rw, ok := w.(*echo.Response); ok && rw == res {
			// Passed through unguarded (method, no key, fail-open):
			// echo's own writer and error flow.
			passErr = next(c)
			return
		}
		inner := echo.NewResponse(w, c.Echo())
		inner.Status = res.Status
		c.SetResponse(inner)
		defer c.SetResponse(res)
		if err := next(c); err != nil {
			// Rendered into the capture, so the record holds what the
			// client got; it is not returned, so it is rendered once.
			c.Error(err)
		}
	})
	return passErr
}

// contextKey keys the echo.Context in the request's context.
type contextKey struct{}

// ContextOf returns the echo.Context of a request the middleware serves,
// or nil for a request it did not see. It is meant for the nethttp hooks,
// which receive the *http.Request: [nethttp.WithScope],
// [nethttp.WithRoute] and [nethttp.WithFingerprint] can read what echo
// holds (values an authentication middleware stored with c.Set, path
// parameters). Like the echo.Context itself (echo reuses it for another
// request), it is valid only while the request is being served.
func ContextOf(r *http.Request) echo.Context {
	c, _ := r.Context().Value(contextKey{}).(echo.Context)
	return c
}
