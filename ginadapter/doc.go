// Package ginadapter makes gin handlers idempotent: the behaviour of
// [nethttp] (every row of its table, the same options and defaults, the
// same RFC 9457 problems), as gin middleware.
//
//	guard, err := middleware.New(memstore.New())
//	...
//	idem, err := ginadapter.New(guard, nethttp.WithKeyRequired(true))
//	...
//	r := gin.New()
//	r.Use(gin.Recovery())
//	r.POST("/orders", idem, createOrder)
//
// It is built on [nethttp.Core]: key parsing, scope, fingerprint, capture,
// replay and problem answers are nethttp's, not a copy. The middleware
// calls [nethttp.Core.Serve] with the request's gin writer (c.Writer) and a
// next that runs the rest of the gin chain (c.Next) inside the guard, with
// a gin.ResponseWriter over the core's capturing writer: whatever the
// handlers write through c.Writer (c.JSON, c.String, c.Status, c.Stream,
// c.Writer.Write, WriteHeaderNow, Flush, Hijack) is what the record holds.
// Status, Size and Written behave as in gin's own writer. Replays and
// problems are written through c.Writer, so gin's status, size and written
// state, and what the middleware before this one sees, are what the client
// got.
//
// # The gin chain
//
// A replay or a refusal (400, 409, 413, 422, 503) aborts the chain
// (c.Abort): no handler after the middleware runs, and c.IsAborted
// reports it to the middleware before. A handler after it that aborts with
// a status (c.AbortWithStatus(403), c.AbortWithStatusJSON) has answered the
// request like any other: the answer is recorded or forgotten by the store
// policy ([nethttp.WithStorePolicy]; by default 2xx–4xx are recorded and
// replayed; 5xx, and answers that ask the client to try again such as 429,
// forgotten). A status set without a body (c.Status(204)) is
// sent when the chain returns, so the client and the record agree; so is
// gin's 404 or 405 for an unmatched route when the middleware is global
// (r.Use), with gin's own text/plain body ("404 page not found").
//
// A chain that writes nothing is recorded as 200 with an empty body, which
// is what gin sends for it. But a chain that writes nothing and leaves
// errors in c.Errors (c.Error(err), gin's central error handling) is
// expected to be answered by a middleware in front of this one that
// renders c.Errors after c.Next(), outside the capture: that request is
// recorded as executed-not-replayable (by the store policy of the status
// the chain chose, 200 if none; that status is handed to gin's writer
// unsent, so the error middleware may still change it), and a retry gets
// 409 response-not-replayable without running the handler again. To have
// such errors replayed, render them inside the guard: in a middleware
// after this one, or in the handler. If the handler wrote in its
// transaction (pgstore.Tx), such a request is rolled back instead and not
// recorded, and a retry runs it again.
//
// Handlers reach the guarded work's context, for [middleware.CallInfoFrom]
// and pgstore.Tx, through c.Request.Context() (or c itself when the engine
// has ContextWithFallback set).
//
// Streaming works: c.Stream, c.SSEvent and c.Writer.Flush send each chunk
// at once; a flushed (or hijacked) response is recorded as
// executed-not-replayable, so a retry gets 409 response-not-replayable and
// the handler never runs again.
//
// # Panics
//
// A panic in the guarded chain is caught by the core: logged, answered 500
// internal-error (problem+json), recorded only if the store policy's Panic
// field says so (not by default: the claim is released and a retry runs
// again), and the chain is aborted. http.ErrAbortHandler goes on to gin
// (recorded as executed-not-replayable if the chain had begun its answer).
// Keep gin.Recovery (or your own) in front for everything else. A timeout
// middleware belongs in front of this one too (see [nethttp]).
//
// # Scope and route
//
// The scope ([nethttp.WithScope]) is the namespace a key lives in: the
// tenant or principal, so one client's key never replays another's
// response; by default one namespace for the whole service. The route in
// the fingerprint is the request's path as the client sent it, escapes
// kept, as in nethttp: with UseRawPath, gin reads "/transfer/a%2Fb/c" and
// "/transfer/a/b%2Fc" as different requests, and so does the fingerprint.
// It is not gin's route pattern (c.FullPath()): a pattern such as
// "/orders/:id/pay" covers requests that must never replay each other, so
// paying order 2 with the key used for order 1 is a 422, not order 1's
// receipt. A key reused on
// another route, method, query or body is a 422; it is never a replay and
// never a second execution.
//
// The hooks receive the *http.Request; [ContextOf] gives them the
// *gin.Context, so a scope can come from what an authentication middleware
// stored with c.Set:
//
//	ginadapter.New(guard, nethttp.WithScope(func(r *http.Request) string {
//		return ginadapter.ContextOf(r).GetString("tenant")
//	}))
//
// The key is found where [nethttp.WithKey] says (the Idempotency-Key
// header by default; a query parameter, a JSON body field or a function of
// yours otherwise), and the middleware's own answers are written by
// [nethttp.WithProblemWriter] (RFC 9457 problems by default), through
// c.Writer like the rest.
//
// # Observability
//
// The operation that hooks, outcome watchers and the handler see is the
// method and gin's route: "POST /orders/:id" (c.FullPath()), "" for a
// request no route matched; [nethttp.WithOperation] names it otherwise.
// Every request has one outcome (see [nethttp]): the guard's hooks
// (middleware.WithHook) get it with the request's context, and a gin
// middleware in front reads it from the request's context once c.Next
// returns:
//
//	r.Use(func(c *gin.Context) {
//		ctx, outcome := middleware.WatchOutcome(c.Request.Context())
//		c.Request = c.Request.WithContext(ctx)
//		c.Next()
//		if e, ok := outcome(); ok {
//			slog.InfoContext(ctx, "request", "route", c.FullPath(), "idempotency", e.Kind.String())
//		}
//	}, idem)
//
// Handlers read their key, scope, operation and fence from
// c.Request.Context() (middleware.CallInfoFrom) and can ask not to be
// recorded (middleware.DoNotRecord); [nethttp.WithRecordTTL] sets a
// route's record TTL.
package ginadapter
