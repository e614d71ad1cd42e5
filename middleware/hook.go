package middleware

import (
	"context"
	"time"

	"github.com/idemkit/idemkit"
)

// EventKind names what happened to one guarded call.
type EventKind uint8

// The events. A call starts with EventStart (given to
// [Hook.IdempotencyStart]), may report EventWaiting, EventLeaseLost,
// EventBackendError, EventStepRecorded and EventStepReplayed, and ends with exactly one outcome
// ([EventKind.Outcome]). A call refused before it starts, and a request an
// adapter did not hand to the guard ([Guard.Bypass]), have only their
// outcome.
const (
	// EventStart: the call starts.
	EventStart EventKind = iota + 1

	// EventWaiting: a duplicate of a running request starts waiting.
	EventWaiting
	// EventLeaseLost: the claim's lease was lost before its outcome was
	// recorded.
	EventLeaseLost
	// EventBackendError: a backend call failed and the guard carries on
	// (an extension, a release, a retried completion).
	EventBackendError
	// EventStepRecorded: a step of the work ([Step]) ran and its result
	// was recorded; StepName and StepIndex name it, Size is its result's
	// bytes and Ran the time it ran.
	EventStepRecorded
	// EventStepReplayed: a step of the work returned the result recorded
	// by an earlier run (its recovery point) without running; StepName,
	// StepIndex and Size as for EventStepRecorded.
	EventStepReplayed

	// EventExecuted (outcome): fn ran in this call; Recorded tells whether
	// its outcome was stored; Err is fn's error.
	EventExecuted
	// EventNotRecorded (outcome): fn ran but its outcome could not be
	// recorded; the claim is left to run out.
	EventNotRecorded
	// EventReplayed (outcome): a recorded response was returned.
	EventReplayed
	// EventMismatch (outcome): the key was reused with a different
	// request.
	EventMismatch
	// EventCredentialsMismatch (outcome): the key's record was written by
	// a call with other credentials ([Credentials]): another caller, or a
	// client whose credentials changed between retries.
	EventCredentialsMismatch
	// EventInProgress (outcome): another request held the key past the
	// wait budget.
	EventInProgress
	// EventNotReplayable (outcome): the key's request ran; its response
	// cannot be replayed.
	EventNotReplayable
	// EventUnavailable (outcome): the backend failed; fn did not run.
	EventUnavailable
	// EventCanceled (outcome): the caller's ctx ended first.
	EventCanceled
	// EventFailedOpen (outcome): the backend could not be reached and fn
	// ran unguarded ([FailOpen]).
	EventFailedOpen
	// EventPassedThrough (outcome, from an adapter): the request was not
	// guarded.
	EventPassedThrough
	// EventRejected (outcome): the key, an option or (from an adapter) the
	// request was refused before the guard ran; Err says why.
	EventRejected
)

var eventNames = [...]string{
	EventStart: "start", EventWaiting: "waiting", EventLeaseLost: "lease-lost", EventBackendError: "backend-error",
	EventStepRecorded: "step-recorded", EventStepReplayed: "step-replayed",
	EventExecuted: "executed", EventNotRecorded: "not-recorded", EventReplayed: "replayed", EventMismatch: "mismatch",
	EventCredentialsMismatch: "credentials-mismatch", EventInProgress: "in-progress", EventNotReplayable: "not-replayable",
	EventUnavailable: "unavailable", EventCanceled: "canceled", EventFailedOpen: "failed-open", EventPassedThrough: "passed-through", EventRejected: "rejected",
}

// String returns the event's name, such as "replayed", fit for a metric
// attribute.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "unknown"
}

// Outcome reports whether k ends a call.
func (k EventKind) Outcome() bool { return k >= EventExecuted && k <= EventRejected }

// Event describes one thing that happened to a guarded call. Keys and
// scopes are given only as keyed hashes ([WithSecret]).
type Event struct {
	Kind      EventKind
	Operation string        // see [Operation]
	KeyHash   string        // the key, hashed; "" when the request had none
	ScopeHash string        // the scope, hashed the same way; "" when the call has no scope or an empty one
	Fence     idemkit.Fence // the fence of the claim fn ran under, or of the one that wrote the replayed record
	Recorded  bool          // EventExecuted: whether the outcome was stored
	Size      int           // outcomes: the bytes of the response recorded (executed) or replayed; step events: of the step's result
	Attempts  int           // claims made by this call
	Waited    time.Duration // time spent waiting for a running duplicate
	Ran       time.Duration // time fn ran (executed, not-recorded, failed-open), or the step's fn (step-recorded)
	StepName  string        // step events: the step's name, as the work gave it to Step
	StepIndex int           // step events: the step's place in the work, from 0
	Duration  time.Duration // the whole call so far
	Err       error         // the error, for failures and fn errors
}

// Hook observes guarded calls, as a tracer does: IdempotencyStart gets the
// caller's ctx and returns the one the call (and fn) goes on with, so a hook
// can open a span there; IdempotencyEvent gets every later event, last the
// outcome. Hooks run synchronously; a panic in one is recovered.
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
