// Package middleware is idemkit's core engine, the guard: it runs a piece
// of work at most once per idempotency key, across every process that shares
// its backend, and hands every retry the recorded response. It knows nothing
// of HTTP or gRPC; adapters (nethttp, gin, echo, gRPC) call [Guard.Execute]
// with a key, a fingerprint of the request and the work.
//
//	guard, err := middleware.New(memstore.New())
//	out, err := guard.Execute(ctx, key, fp, func(ctx context.Context) (middleware.Result, error) {
//		return middleware.Result{Value: encode(resp)}, nil
//	})
//
// [Do] does the same for any Go function, with JSON encoding of its value.
//
// The backend is a [store.Store]: records that carry their own lease
// (memstore, redisstore, pgstore, firestorestore, or any record store paired
// with any lock provider through store.Compose).
//
// # Guarantees
//
//   - A replay costs one round trip; a first execution two (claim, then
//     complete).
//   - Two racing duplicates never both run the work: one claim wins, the
//     others wait for its outcome up to the wait budget.
//   - A reused key with another request is refused ([ErrMismatch]), also
//     while the first request still runs.
//   - A call bound to its caller's credentials ([Credentials]) never gets
//     the response recorded for other credentials: it is refused
//     ([ErrCredentialsMismatch]). Only a keyed hash of the credentials is
//     stored ([WithSecret]).
//   - The work's error, panic or cancellation releases the claim and stores
//     nothing.
//   - The outcome is written on a context detached from the caller's, only
//     while the record still carries the claim's fence, and retried while
//     the lease is extended; an outcome that cannot be recorded or replayed
//     is never silently run again.
//   - Every backend call has a deadline (the op timeout); when the backend
//     fails the guard answers [ErrUnavailable] rather than guess.
//
// # Observability
//
// Every call emits [Event] values to a [Hook] (executed, replayed, mismatch,
// credentials-mismatch, in-progress, not-replayable, lease-lost,
// not-recorded, backend-error), with keys hashed, claim attempts, waits and
// durations.
package middleware
