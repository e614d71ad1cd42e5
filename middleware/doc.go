// Package middleware is idemkit's core engine, the guard: it runs a piece
// of work at most once per idempotency key, across every process that shares
// its record store and locker, and hands every retry the recorded response.
// It knows nothing of HTTP or gRPC; adapters (nethttp, gin, echo, gRPC) call
// [Guard.Execute] with a key, a fingerprint of the request and the work.
//
//	guard, err := middleware.New(memstore.New(), memlock.New())
//	out, err := guard.Execute(ctx, key, fp, func(ctx context.Context) (middleware.Result, error) {
//		return middleware.Result{Value: encode(resp)}, nil
//	})
//
// [Do] does the same for any Go function, with JSON encoding of its value.
//
// # Guarantees
//
//   - A replay never takes the lock: one store read.
//   - Two racing duplicates never both run the work: the lock serialises
//     them, and the record is read again under it.
//   - A reused key with another request is refused ([ErrMismatch]).
//   - The work's error, panic or cancellation releases the lock and stores
//     nothing.
//   - The record is written on a context detached from the caller's, fenced
//     by the lease's fence, and retried while the lease holds; an outcome
//     that cannot be recorded or replayed is never silently run again.
//   - When a backend fails the guard answers [ErrUnavailable] rather than
//     guess.
//
// # Observability
//
// Every call emits [Event] values to a [Hook] (executed, replayed, mismatch,
// in-progress, not-replayable, lease-lost, not-recorded, backend-error), with
// keys hashed, attempts and durations.
package middleware
