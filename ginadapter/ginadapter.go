package ginadapter

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// New validates the options and returns gin middleware that makes the
// handlers after it idempotent with guard. The options and defaults are
// nethttp's, except that the operation hooks see is the route gin matched
// ("POST /orders/:id"). A bad or nil option, or a guard not made by
// middleware.New, is an error here.
func New(guard *middleware.Guard, opts ...nethttp.Option) (gin.HandlerFunc, error) {
	opts = append([]nethttp.Option{nethttp.WithOperation(operation)}, opts...)
	mw, err := nethttp.New(guard, opts...)
	if err != nil {
		return nil, err
	}
	h := mw(http.HandlerFunc(runChain))
	return func(c *gin.Context) { serve(h, c) }, nil
}

// request is one request the middleware serves, in its context.
type request struct {
	c         *gin.Context
	r         *http.Request      // as handed to the nethttp middleware
	outerW    gin.ResponseWriter // gin's writer
	completed bool               // the rest of the chain ran
}

// serve runs one request through the nethttp middleware h, whose next
// handler (runChain) runs the rest of the gin chain at most once per key.
func serve(h http.Handler, c *gin.Context) {
	outerR := c.Request
	st := &request{c: c, outerW: c.Writer}
	st.r = outerR.WithContext(context.WithValue(outerR.Context(), contextKey{}, st))
	defer func() { c.Request = outerR }()
	h.ServeHTTP(st.outerW, st.r)
	if !st.completed {
		// A replay or a problem answered the request, or the chain
		// panicked: nothing after us may run.
		c.Abort()
	}
}

// runChain is the nethttp middleware's next handler: the rest of the gin
// chain, with a gin.ResponseWriter over the capturing writer.
func runChain(w http.ResponseWriter, inner *http.Request) {
	st := inner.Context().Value(contextKey{}).(*request)
	c := st.c
	c.Request = inner
	if inner == st.r {
		// Passed through unguarded: gin's own writer.
		c.Next()
		st.completed = true
		return
	}
	gw := newResponseWriter(w, st.outerW)
	c.Writer = gw
	defer func() { c.Writer = st.outerW }()
	errs := len(c.Errors)
	c.Next()
	if !gw.Written() && len(c.Errors) > errs {
		// The chain wrote nothing and left errors for gin's central error
		// handling, which renders them outside the capture once we
		// return: what the client gets is not what the capture holds, so
		// it is never replayed. The status chosen goes to gin's writer
		// unsent, for that middleware to keep or change.
		nethttp.MarkNotReplayable(w)
		gw.stage()
	} else {
		gw.commit()
	}
	st.completed = true
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

// contextKey keys the request's state in its context.
type contextKey struct{}

// ContextOf returns the *gin.Context of a request the middleware serves,
// or nil for one it did not see, for the nethttp hooks, which get the
// *http.Request (a scope from a value set with c.Set, a path parameter).
// Like the gin.Context, it is valid only while the request is served.
//
//	nethttp.WithScope(func(r *http.Request) string {
//		return ginadapter.ContextOf(r).GetString("tenant")
//	})
func ContextOf(r *http.Request) *gin.Context {
	if st, ok := r.Context().Value(contextKey{}).(*request); ok {
		return st.c
	}
	return nil
}
