package middleware

import (
	"context"
	"time"

	"github.com/idemkit/idemkit"
)

// EventKind names what happened to one guarded call.
type EventKind uint8

// The events. A call made through [Guard.Execute] or [Do] starts with
// EventStart (given to [Hook.IdempotencyStart]), may report what happens
// while it runs (EventWaiting, EventLeaseLost, EventBackendError), and ends
// with exactly one outcome: EventExecuted, EventNotRecorded,
// EventReplayed, EventMismatch, EventCredentialsMismatch,
// EventInProgress, EventNotReplayable, EventUnavailable, EventCanceled
// or EventFailedOpen. A call refused before it starts (an invalid key or
// option) has one event: its outcome, EventRejected. A request an adapter did not hand to the guard
// ([Guard.Bypass]) has one event: its outcome, EventPassedThrough or
// EventRejected.
const (
	// EventStart: the call starts; Operation, KeyHash and ScopeHash are
	// set.
	EventStart EventKind = iota + 1

	// EventWaiting: another request holds the key's claim, with the same
	// credentials and request: this call waits for its outcome (once per
	// call, at the first busy answer).
	EventWaiting
	// EventLeaseLost: the claim's lease was lost while fn ran or before its
	// outcome was recorded: another claim replaced it, or it ran out while
	// the backend could not be reached.
	EventLeaseLost
	// EventBackendError: a backend call failed and the guard carries on
	// (an extension, a release, a completion it retries); Err says how.
	EventBackendError

	// EventExecuted (outcome): fn ran in this call. Recorded tells whether
	// its outcome was stored (false after a Forget verdict, DoNotRecord or
	// an error of fn, which is Err).
	EventExecuted
	// EventNotRecorded (outcome): fn ran but its outcome could not be
	// recorded (the key was claimed by another request, or the store kept
	// failing until the write budget ran out). The claim is left to run
	// out, so retries are told "in progress" until then.
	EventNotRecorded
	// EventReplayed (outcome): a recorded response was returned; fn did not
	// run.
	EventReplayed
	// EventMismatch (outcome): the key was reused with a different
	// request.
	EventMismatch
	// EventCredentialsMismatch (outcome): the key's record was written by
	// a call with other credentials (see [Credentials]); Err is
	// [ErrCredentialsMismatch]. It is not a Mismatch, because it means
	// something else: another caller reusing a key it saw (or guessed), or
	// a client whose credentials changed between its retries, where a
	// Mismatch is a client reusing its own key for another request.
	EventCredentialsMismatch
	// EventInProgress (outcome): another request held its claim on the key
	// past the wait budget.
	EventInProgress
	// EventNotReplayable (outcome): the key's request ran before but its
	// response cannot be replayed; this call was refused.
	EventNotReplayable
	// EventUnavailable (outcome): the backend failed, so the guard could
	// not tell whether fn already ran and did not run it; Err says how.
	EventUnavailable
	// EventCanceled (outcome): the caller's ctx ended before the call had
	// another outcome (the client went away while its claim was being made
	// or while it waited); Err is the ctx's error.
	EventCanceled
	// EventFailedOpen (outcome): the backend could not be reached and the
	// call asked to fail open ([FailOpen]): fn ran unguarded, nothing was
	// recorded; Err is the backend's failure.
	EventFailedOpen
	// EventPassedThrough (outcome, from an adapter): the request was not
	// guarded (its method is not guarded, or it has no key and none is
	// required); Err is nil.
	EventPassedThrough
	// EventRejected (outcome, from an adapter): the request was refused
	// before it reached the guard (a missing or malformed key, a body over
	// the limit or unreadable); Err says why.
	EventRejected
)

var eventNames = [...]string{
	EventStart: "start", EventWaiting: "waiting", EventLeaseLost: "lease-lost", EventBackendError: "backend-error",
	EventExecuted: "executed", EventNotRecorded: "not-recorded", EventReplayed: "replayed", EventMismatch: "mismatch",
	EventCredentialsMismatch: "credentials-mismatch", EventInProgress: "in-progress", EventNotReplayable: "not-replayable",
	EventUnavailable: "unavailable", EventCanceled: "canceled", EventFailedOpen: "failed-open", EventPassedThrough: "passed-through", EventRejected: "rejected",
}

// String returns the event's name, such as "replayed": lower case words
// joined by '-', fit for a metric attribute.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "unknown"
}

// Outcome reports whether k ends a call (executed, not-recorded, replayed,
// mismatch, credentials-mismatch, in-progress, not-replayable,
// unavailable, canceled, failed-open, passed-through, rejected).
func (k EventKind) Outcome() bool { return k >= EventExecuted && k <= EventRejected }

// Event describes one thing that happened to a guarded call. Keys and
// scopes are never given raw: KeyHash and ScopeHash are keyed hashes (see
// [WithSecret]), so events can go to logs and telemetry.
type Event struct {
	Kind EventKind
	// Operation names what the call does, as its adapter says (see
	// [Operation]): the route pattern, gin's FullPath(), echo's Path(), the
	// gRPC full method; "" when unknown.
	Operation string
	KeyHash   string        // the key, hashed (HMAC-SHA-256; see WithSecret); "" when the request had none
	ScopeHash string        // the scope, hashed the same way; "" when the call has no scope or an empty one
	Fence     idemkit.Fence // the fence of the claim fn ran under, or of the one that wrote the replayed record
	Recorded  bool          // EventExecuted: whether the outcome was stored
	Size      int           // outcomes: the bytes of the response recorded (executed) or replayed
	Attempts  int           // claims made by this call
	Waited    time.Duration // time spent waiting for a running duplicate
	Ran       time.Duration // time fn ran (executed, not-recorded, failed-open)
	Duration  time.Duration // the whole call so far
	Err       error         // the error, for failures and fn errors
}

// Hook observes guarded calls, as a tracer does: IdempotencyStart when a
// call starts, IdempotencyEvent for what happens while it runs and, last,
// for its outcome (Event.Kind.Outcome()). Both get the call's context: the
// caller's for IdempotencyStart, then the one IdempotencyStart returned,
// which the call goes on with (fn's ctx derives from it), so a hook can
// start a span there, under the request's, and end it with the outcome.
//
// Hooks run synchronously on the request's path (a renewal's backend error
// on the renewal's goroutine); a panic in one is recovered and ignored.
// Requests an adapter did not hand to the guard get IdempotencyEvent only,
// with their outcome (see [Guard.Bypass]).
type Hook interface {
	IdempotencyStart(ctx context.Context, e Event) context.Context
	IdempotencyEvent(ctx context.Context, e Event)
}

// HookFunc adapts a function to [Hook]: it receives every event but the
// start, whose ctx it leaves as it is.
type HookFunc func(ctx context.Context, e Event)

// IdempotencyStart returns ctx.
func (f HookFunc) IdempotencyStart(ctx context.Context, _ Event) context.Context { return ctx }

// IdempotencyEvent calls f(ctx, e).
func (f HookFunc) IdempotencyEvent(ctx context.Context, e Event) { f(ctx, e) }
