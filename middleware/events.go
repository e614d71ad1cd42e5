package middleware

import (
	"time"

	"github.com/idemkit/idemkit/lock"
)

// EventKind names what happened to one guarded call.
type EventKind uint8

// The events. Every call to Execute ends with exactly one of Executed,
// Replayed, Mismatch, CredentialsMismatch, InProgress, NotReplayable or
// BackendError. Before an
// Executed, LeaseLost, NotRecorded and BackendError (a failed record write
// that is retried) report what happened to the outcome.
const (
	// EventExecuted: fn ran in this call. Recorded tells whether its
	// outcome was stored; Err is fn's error, if any.
	EventExecuted EventKind = iota + 1
	// EventReplayed: a stored response was returned; fn did not run.
	EventReplayed
	// EventMismatch: the key was reused with a different request.
	EventMismatch
	// EventInProgress: another request held its claim on the key past the
	// wait budget.
	EventInProgress
	// EventNotReplayable: the key's request ran before but its response
	// cannot be replayed; this call was refused.
	EventNotReplayable
	// EventLeaseLost: the claim's lease was lost while fn ran or before its
	// outcome was recorded: another claim replaced it, or it ran out while
	// the backend could not be reached.
	EventLeaseLost
	// EventNotRecorded: fn ran but its outcome could not be recorded (the
	// key was claimed by another request, or the store kept failing until
	// the write budget ran out). The claim is left to run out, so retries
	// are told "in progress" until then.
	EventNotRecorded
	// EventBackendError: the backend failed; Err says how.
	EventBackendError
	// EventCredentialsMismatch: the key's record was written by a call
	// with other credentials (see [Credentials]); Err is
	// [ErrCredentialsMismatch]. It is an event of its own, not a
	// Mismatch, because it means something else: another caller reusing a
	// key it saw (or guessed), or a client whose credentials changed
	// between its retries, where a Mismatch is a client reusing its own key
	// for another request.
	EventCredentialsMismatch
)

var eventNames = [...]string{
	EventExecuted: "executed", EventReplayed: "replayed", EventMismatch: "mismatch",
	EventInProgress: "in-progress", EventNotReplayable: "not-replayable", EventLeaseLost: "lease-lost",
	EventNotRecorded: "not-recorded", EventBackendError: "backend-error", EventCredentialsMismatch: "credentials-mismatch",
}

// String returns the event's name, such as "replayed".
func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "unknown"
}

// Event describes one thing that happened to a guarded call.
type Event struct {
	Kind     EventKind
	KeyHash  string        // the key, hashed (HMAC-SHA-256; see WithSecret)
	Fence    lock.Fence    // the fence of the claim fn ran under, or of the one that wrote the replayed record
	Recorded bool          // EventExecuted: whether the outcome was stored
	Attempts int           // claims made by this call
	Waited   time.Duration // time spent waiting for a running duplicate
	Duration time.Duration // the whole call so far
	Err      error         // the error, for failures and fn errors
}

// Hook receives events. It runs synchronously; a panic in it is recovered
// and ignored.
type Hook interface {
	IdempotencyEvent(Event)
}

// HookFunc adapts a function to [Hook].
type HookFunc func(Event)

// IdempotencyEvent calls f(e).
func (f HookFunc) IdempotencyEvent(e Event) { f(e) }
