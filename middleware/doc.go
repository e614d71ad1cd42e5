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
// with any lock provider through [Compose]).
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
// Hooks ([WithHook], any number, called in order) see every call the way a
// tracer does. [Hook.IdempotencyStart] gets the caller's ctx and an
// [EventStart] (the operation, the hashed key and scope) and returns the
// ctx the call goes on with: the work's ctx and the ctx of every later
// event derive from it, so a hook can open a span there, under the
// request's, and close it at the outcome. [Hook.IdempotencyEvent] then gets
// what happens while the call runs (waiting, lease-lost, backend-error)
// and, last, exactly one outcome ([EventKind.Outcome]):
//
//   - executed: the work ran in this call; Recorded tells whether its
//     outcome was stored (not after a Forget verdict, [DoNotRecord] or an
//     error of the work);
//   - not-recorded: the work ran, but its outcome could not be stored;
//   - replayed: the recorded response was returned;
//   - mismatch, credentials-mismatch: the key was reused with another
//     request, or by a caller with other credentials;
//   - in-progress: another request held the key past the wait budget;
//   - not-replayable: the key's request ran, its response cannot be
//     replayed;
//   - unavailable: the backend failed and the work did not run;
//   - canceled: the caller's ctx ended first;
//   - failed-open: the backend could not be reached and the call asked to
//     run unguarded ([FailOpen]);
//   - rejected: the key or an option was invalid (a call refused this way
//     has no start), or an adapter refused the request;
//   - passed-through: an adapter did not guard the request.
//
// The last two come from adapters too, through [Guard.Bypass], so every
// request that reaches an adapter has one outcome. [HookFunc] adapts a
// function that wants the events only. A [HookFunc] that logs outcomes:
//
//	middleware.WithHook(middleware.HookFunc(func(ctx context.Context, e middleware.Event) {
//		if e.Kind.Outcome() {
//			slog.InfoContext(ctx, "idempotency", "operation", e.Operation, "outcome", e.Kind.String())
//		}
//	}))
//
// The guard's logger ([WithLogger], default slog.Default()) says why the
// backend cannot serve: the first failure of each cause (the backend
// error's code and detail, which name the fix where there is one, such as
// "run pgstore.SetupSchema") at once, later ones at most once per
// interval with a count ([WithFailureLogInterval], default 1 min). A
// failure with code idemkit.CodeAuthFailed or idemkit.CodeMisconfigured
// lasts until an operator fixes the backend's setup: the adapters answer
// it as a server error (HTTP 500, gRPC Internal), not "retry later".
// [Guard.Check] finds such a failure at startup.
//
// Keys and scopes reach events only as keyed hashes (KeyHash, ScopeHash;
// the same on every node given the same [WithSecret]); [Operation] names
// what the call does (a route pattern, a gRPC method) and must have few
// distinct values. Hooks run on the request's path; a panic in one is
// recovered.
//
// Code outside the guard reads a request's outcome from its context:
// [WatchOutcome] gives an access log or a metrics middleware in front of
// the adapter a ctx to pass on and, once the request is served, its
// outcome. The work itself reads its call from its ctx: [CallInfoFrom]
// gives its operation, scope, key and the fence of its claim (to fence
// its own writes downstream), and [DoNotRecord] asks that its outcome not
// be stored, so that a retry runs it again. An adapter that sends part of
// its answer while the work runs asks [TransactionBegun] whether the work
// began a transaction that commits with its outcome, and holds what it
// would send until the commit landed.
//
// # Operations
//
// [Guard.Inspect] shows an operator one key's record without changing it:
// its record key, state (claimed, completed, not-replayable), fingerprint
// algorithm, whether it is bound to credentials, fence, times, the size of
// its response and whether it is sealed; the response itself only when
// asked for (one round trip). [Guard.Forget] deletes an outcome: the way
// out of a key recorded not replayable, or of one whose sealed response no
// longer opens (two round trips: a read, then the delete). It refuses a
// live claim, whose holder may still be running the work, with the lease's
// expiry ([LiveClaimError]); [Force] deletes that too. [Guard.List] lists
// the live records of a scope, of every scope or of the keys with a
// prefix, a bounded page at a time (a [store.Lister] backend: every store
// of this repository). store.Inspect and store.List do what Inspect and
// List do on a [store.Store] by record key.
//
// [Guard.Check], called at startup, claims and releases a record of its
// own as a request would, and returns the backend's error, whose text
// names the fix, if it cannot serve.
package middleware
