// Package ginadapter makes gin handlers idempotent: the behaviour of
// [nethttp] (the same table, options, defaults and RFC 9457 problems), as
// gin middleware built on nethttp's, never a copy.
//
//	guard, err := middleware.New(memstore.New())
//	...
//	idem, err := ginadapter.New(guard, nethttp.WithKeyRequired(true))
//	...
//	r := gin.New()
//	r.Use(gin.Recovery())
//	r.POST("/orders", idem, createOrder)
//
// The rest of the gin chain (c.Next) runs inside the guard, at most once
// per key: what handlers write through c.Writer (c.JSON, c.Stream, Flush,
// Hijack) is what the record holds, and gin's status, size and written
// state stay right. A replay or a refusal aborts the chain. The route in
// the fingerprint is the path as sent, never gin's pattern; the operation
// hooks see is gin's route ("POST /orders/:id").
//
// [ContextOf] hands the *gin.Context to the nethttp hooks:
//
//	ginadapter.New(guard, nethttp.WithScope(func(r *http.Request) string {
//		return ginadapter.ContextOf(r).GetString("tenant")
//	}))
//
// docs/http.md explains gin's error handling (c.Errors rendered outside
// the capture is recorded not replayable), panics and streaming.
package ginadapter
