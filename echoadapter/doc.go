// Package echoadapter makes echo handlers idempotent: the behaviour of
// [nethttp] (every row of its table, the same options and defaults, the
// same RFC 9457 problems), as echo middleware; nethttp's options go in
// through [WithHTTPOptions], and [WithSkipper] skips requests in echo's
// style.
//
//	guard, err := middleware.New(memstore.New())
//	...
//	idem, err := echoadapter.New(guard, echoadapter.WithHTTPOptions(nethttp.WithKeyRequired(true)))
//	...
//	e := echo.New()
//	e.POST("/orders", createOrder, idem)
//
// It is built on [nethttp.Core]: key parsing, scope, fingerprint, capture,
// replay and problem answers are nethttp's, not a copy. The middleware
// calls [nethttp.Core.Serve] with the request's *echo.Response and a next
// that runs the rest of the echo chain inside the guard, with a fresh
// *echo.Response (c.SetResponse) over the core's capturing writer: whatever
// the handlers write through c.Response() (c.JSON, c.String, c.NoContent,
// c.Stream, Flush, Hijack) is what the record holds. Replays and problems
// are written through the request's *echo.Response, so its Status, Size,
// Committed and Before/After hooks are what the middleware before this one
// sees.
//
// # Errors
//
// A handler that returns an error (an *echo.HTTPError or any other) has its
// error rendered by the echo instance's HTTPErrorHandler inside the guard,
// so the rendered response is what is delivered and, by the store policy
// ([nethttp.WithStorePolicy]), recorded: by default a 4xx such as
// echo.NewHTTPError(http.StatusPaymentRequired, ...) is recorded and
// replayed, while a 5xx (a plain error renders as 500) or an answer that
// asks the client to try again (429, say) is delivered and forgotten, so a
// retry runs the handler again. The error is rendered once:
// the middleware then returns nil, so it never reaches the error handler a
// second time, and the middleware before this one sees the rendered status
// in c.Response().Status, as it does on a replay, where no handler runs.
// Requests the middleware passes through unguarded (skipped, method not
// guarded, no key, fail-open) follow echo's own flow: their error is
// returned as is.
//
// The middleware's own answers (refusals: 400, 409, 413, 422, 503) are
// RFC 9457 problems it writes itself by default, or what
// [nethttp.WithProblemWriter] writes. With [WithErrorHandler](true) they
// are returned as errors instead, for echo's HTTPErrorHandler to render
// like any other: an *echo.HTTPError with the problem's status, wrapping a
// [*ProblemError] that holds the [nethttp.Problem]:
//
//	e.HTTPErrorHandler = func(err error, c echo.Context) {
//		var pe *echoadapter.ProblemError
//		if errors.As(err, &pe) {
//			_ = c.JSON(pe.StatusCode(), apiError{Code: pe.Problem.Kind, Message: pe.Problem.Detail})
//			return
//		}
//		e.DefaultHTTPErrorHandler(err, c)
//	}
//
// A panic in the guarded chain is caught by the core: logged, answered 500
// internal-error (problem+json) and recorded only if the store policy's
// Panic field says so. Keep echo's Recover middleware in front for
// everything else.
//
// Streaming works: a flushed or hijacked response is delivered at once and
// recorded as executed-not-replayable, so a retry gets 409
// response-not-replayable and the handler never runs again.
//
// # Other middleware
//
// Request decompression (echo's Decompress) may sit in front: the body is
// read through the limit whatever Content-Length says. Response compression
// (echo's Gzip) is best in front too, so the record holds the identity body
// and any client can get the replay. After this middleware it works, but
// the record holds the compressed bytes with their Content-Encoding and
// Vary, and a retry whose Accept-Encoding does not take that coding gets
// 409 response-not-replayable (see [nethttp]). A timeout middleware that
// answers for the handler (echo's Timeout) belongs in front of this one:
// after it, it answers 503 while the handler runs on, and a retry may run
// the handler again.
//
// # Scope and route
//
// The scope ([nethttp.WithScope]) is the namespace a key lives in: the
// tenant or principal, so one client's key never replays another's
// response; by default one namespace for the whole service. The route in
// the fingerprint is the request's path as the client sent it, escapes
// kept, as in nethttp: echo routes on it, reading "/transfer/a%2Fb/c" and
// "/transfer/a/b%2Fc" as different requests, and so does the fingerprint.
// It is not echo's route pattern (c.Path()): a pattern such as
// "/orders/:id/pay" covers requests that must never replay each other, so
// paying order 2 with the key used for order 1 is a 422, not order 1's
// receipt. A key reused on
// another route, method, query or body is a 422; it is never a replay and
// never a second execution.
//
// The hooks receive the *http.Request; [ContextOf] gives them the
// echo.Context, so a scope can come from what an authentication middleware
// stored with c.Set:
//
//	echoadapter.WithHTTPOptions(nethttp.WithScope(func(r *http.Request) string {
//		tenant, _ := echoadapter.ContextOf(r).Get("tenant").(string)
//		return tenant
//	}))
//
// The key is found where [nethttp.WithKey] says: the Idempotency-Key
// header by default; a query parameter, a JSON body field or a function of
// yours otherwise.
//
// # Observability
//
// The operation that hooks, outcome watchers and the handler see is the
// method and echo's route: "POST /orders/:id" (c.Path());
// [nethttp.WithOperation] names it otherwise. Every request has one
// outcome (see [nethttp]): the guard's hooks (middleware.WithHook) get it
// with the request's context, and an echo middleware in front reads it
// from the request's context once next returns:
//
//	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
//		return func(c echo.Context) error {
//			ctx, outcome := middleware.WatchOutcome(c.Request().Context())
//			c.SetRequest(c.Request().WithContext(ctx))
//			err := next(c)
//			if e, ok := outcome(); ok {
//				slog.InfoContext(ctx, "request", "route", c.Path(), "idempotency", e.Kind.String())
//			}
//			return err
//		}
//	}, idem)
//
// Handlers read their key, scope, operation and fence from
// c.Request().Context() (middleware.CallInfoFrom) and can ask not to be
// recorded (middleware.DoNotRecord); [nethttp.WithRecordTTL] sets a
// route's record TTL.
package echoadapter
