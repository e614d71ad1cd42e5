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
// The backend is a [store.Store], whose package doc states the fence and
// expiry rules; [Compose] pairs any record store with any lock provider.
//
// A replay costs one round trip, a first execution two. Racing duplicates
// never both run the work: one claims, the others wait up to the wait
// budget. A reused key with another request is refused ([ErrMismatch]); a
// call bound to other credentials ([Credentials]) is refused
// ([ErrCredentialsMismatch]). The work's error, panic or cancellation
// releases the claim and stores nothing. Every backend call has a
// deadline; when the backend fails the guard answers [ErrUnavailable]
// rather than guess.
//
// Work of several steps marks recovery points with [Step] (or [StepOf]):
// each step's result is recorded under the claim's fence before Step
// returns, and a run that follows a crash, a lost lease or an error (whose
// release keeps the steps) returns the recorded results without running
// those steps again, resuming after the last one. A step must depend on
// nothing but its result; the crash window between a step's effect and
// its recording remains. Misuse (outside guarded work, concurrent steps)
// is InvalidArgument, a store that records no steps Misconfigured, and a
// name other than the recorded one [ErrStepMismatch].
//
// Hooks ([WithHook]) see every call's start, what happens while it runs
// and exactly one outcome ([EventKind.Outcome]); [WatchOutcome] gives the
// outcome to code in front of an adapter. The work reads its call from
// its ctx with [CallInfoFrom] (key, scope and the fence of its claim) and
// can ask that its outcome not be stored ([DoNotRecord]). Operators use
// [Guard.Inspect], [Guard.Forget], [Guard.List] and, at startup,
// [Guard.Check].
//
// The algorithm, the options, steps and the errors are explained in
// docs/guard.md; outcomes, hooks and logs in docs/operations.md.
package middleware
