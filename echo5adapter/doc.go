// Package echo5adapter makes echo v5 handlers idempotent: the behaviour of
// [nethttp] (the same table, options, defaults and RFC 9457 problems), as
// echo middleware built on nethttp's, never a copy; echoadapter is the same
// for echo v4. nethttp's options go in through [WithHTTPOptions];
// [WithSkipper] skips requests in echo's style.
//
//	guard, err := middleware.New(memstore.New())
//	...
//	idem, err := echo5adapter.New(guard, echo5adapter.WithHTTPOptions(nethttp.WithKeyRequired(true)))
//	...
//	e := echo.New()
//	e.POST("/orders", createOrder, idem)
//
// The rest of the echo chain runs inside the guard, at most once per key:
// what handlers write through c.Response() is what the record holds, and a
// handler's error is rendered by echo's HTTPErrorHandler inside the guard,
// once, so the rendered answer is what the store policy records or
// forgets. [WithErrorHandler] returns the middleware's own refusals as
// errors for that handler to render. The route in the fingerprint is the
// path as sent, never echo's pattern; the operation hooks see is echo's
// route ("POST /orders/:id").
//
// [ContextOf] hands the *echo.Context to the nethttp hooks:
//
//	echo5adapter.WithHTTPOptions(nethttp.WithScope(func(r *http.Request) string {
//		tenant, _ := echo5adapter.ContextOf(r).Get("tenant").(string)
//		return tenant
//	}))
//
// docs/http.md explains errors, panics and middleware order.
package echo5adapter
