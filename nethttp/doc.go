// Package nethttp makes net/http handlers idempotent: one line of
// middleware in front of a handler, and a retried POST with the same
// Idempotency-Key runs the handler exactly once, across every process that
// shares the guard's backend.
//
//	guard, err := middleware.New(memstore.New())
//	...
//	idem, err := nethttp.New(guard, nethttp.WithKeyRequired(true))
//	...
//	mux.Handle("POST /orders", idem(orders))
//
// A retry with the same key and request gets the recorded status,
// allow-listed headers and body, marked Idempotent-Replayed: true; the
// same key with another request (method, route as sent, query, content
// type, canonical body) is a 422; a duplicate still running past the wait
// budget a 409; a backend that cannot answer a 503 (fail closed unless
// [WithFailOpen]). The table of every situation and its answer, the store
// policy, streaming and middleware order are in docs/http.md.
//
// Answers the middleware writes itself are RFC 9457 problems ([Problem],
// [WriteProblem]) with stable types; [WithProblemWriter] renders them in
// the application's format. Keys come from a header by default, or from
// [WithKey]. Without a scope hook ([WithScope]) every guarded request is
// bound to its credentials, so a caller never gets another caller's
// response. Outcomes reach the guard's hooks and
// middleware.WatchOutcome; the handler reads its call from
// middleware.CallInfoFrom.
//
// [Transport] is the client side: it gives each POST and PATCH a key and
// retries with that same key. [NewAdmin] is an operator's handler to
// inspect and forget one key; [DecodeResponse] decodes a recorded
// response for tools of your own.
package nethttp
