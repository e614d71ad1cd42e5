package ginadapter

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// New validates the options and returns gin middleware that makes the
// handlers after it idempotent with guard. The options are nethttp's (see
// [nethttp.Option]) with the same defaults: POST and PATCH guarded, the
// key optional, a 1 MiB body limit, 2xx–4xx recorded and 5xx forgotten,
// one scope for the whole service, the path as sent (escapes kept) as the
// route; but the
// operation that hooks and telemetry see is gin's: the method and the
// route gin matched, "POST /orders/:id" (c.FullPath(); "" for a request no
// route matched), unless [nethttp.WithOperation] says otherwise.
//
// An invalid or nil option, or a guard not made by middleware.New (nil or
// zero), is an error here; nothing panics on the request path.
func New(guard *middleware.Guard, opts ...nethttp.Option) (gin.HandlerFunc, error) {
	opts = append([]nethttp.Option{nethttp.WithOperation(operation)}, opts...)
	core, err := nethttp.NewCore(guard, opts...)
	if err != nil {
		return nil, err
	}
	return func(c *gin.Context) { serve(core, c) }, nil
}

// serve runs one request through the core. The rest of the gin chain
// (c.Next) is the core's next: it runs at most once per key, inside the
// guard, with a gin.ResponseWriter over the core's capturing writer.
func serve(core *nethttp.Core, c *gin.Context) {
	outerW, outerR := c.Writer, c.Request
	r := outerR.WithContext(context.WithValue(outerR.Context(), contextKey{}, c))
	defer func() { c.Request = outerR }()
	completed := false
	core.Serve(outerW, r, func(w http.ResponseWriter, inner *http.Request) {
		c.Request = inner
		if inner == r {
			// Passed through unguarded (method, no key, fail-open):
			// gin's own writer.
			c.Next()
			completed = true
			return
		}
		gw := newResponseWriter(w, outerW)
		c.Writer = gw
		defer func() { c.Writer = outerW }()
		errs := len(c.Errors)
		c.Next()
		if !gw.Written() && len(c.Errors) > errs {
			// The chain wrote nothing and left errors (c.Error): gin's
			// central error handling has a middleware in front render
			// them once we return, outside the capture. What the client
			// gets is not what the capture holds, so it is never
			// replayed; the status chosen, if any, goes to gin's writer
			// unsent, for that middleware to keep or change.
			nethttp.MarkNotReplayable(w)
			gw.stage()
		} else {
			gw.commit()
		}
		completed = true
	})
	if !completed {
		// A replay or a problem answered the request, or the chain
		// panicked (answered 500 by the core): nothing after us may run.
		c.Abort()
	}
}

// operation names a request's operation by the route gin matched: "POST
// /orders/:id", or "" when no route matched.
func operation(r *http.Request) string {
	c := ContextOf(r)
	if c == nil {
		return ""
	}
	p := c.FullPath()
	if p == "" {
		return ""
	}
	return r.Method + " " + p
}

// contextKey keys the *gin.Context in the request's context.
type contextKey struct{}

// ContextOf returns the *gin.Context of a request the middleware serves,
// or nil for a request it did not see. It is meant for the nethttp hooks,
// which receive the *http.Request: [nethttp.WithScope],
// [nethttp.WithRoute], [nethttp.WithOperation], [nethttp.WithKey] (with
// [nethttp.FuncKey]), [nethttp.WithProblemWriter] and
// [nethttp.WithFingerprint] can read what gin
// holds (values an authentication middleware stored with c.Set, path
// parameters). Like the gin.Context itself, it is valid only while the
// request is being served.
//
//	nethttp.WithScope(func(r *http.Request) string {
//		return ginadapter.ContextOf(r).GetString("tenant")
//	})
func ContextOf(r *http.Request) *gin.Context {
	c, _ := r.Context().Value(contextKey{}).(*gin.Context)
	return c
}
