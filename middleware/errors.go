package middleware

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
)

// Sentinels: every error the guard returns for a request it refused
// matches exactly one of them with errors.Is. docs/guard.md maps them to
// HTTP and gRPC answers.
var (
	// ErrInProgress: another request with the key holds its claim past
	// the wait budget, or [Guard.Forget] refused to delete it
	// ([LiveClaimError]). Retry later.
	ErrInProgress = errors.New("idempotency: a request with this key is in progress")
	// ErrMismatch: the key was already used for a different request.
	ErrMismatch = errors.New("idempotency: the key was used for a different request")
	// ErrNotReplayable: the request ran, but its response cannot be
	// replayed; it never runs again under this key.
	ErrNotReplayable = errors.New("idempotency: the request was executed but its response cannot be replayed")
	// ErrUnavailable: the backend failed, so the guard cannot tell whether
	// the request already ran. With code idemkit.CodeAuthFailed or
	// idemkit.CodeMisconfigured, retrying cannot help.
	ErrUnavailable = errors.New("idempotency: the idempotency backend is unavailable")
	// ErrCredentialsMismatch: the key's record was written by a call with
	// other credentials ([Credentials]); it tells nothing of that request
	// and does not match [ErrMismatch].
	ErrCredentialsMismatch = errors.New("idempotency: the key was used with other credentials")
	// ErrInvalidKey: the key is empty or otherwise unusable.
	ErrInvalidKey = errors.New("idempotency: invalid key")
)

// inProgressError: a duplicate's claim was refused for the whole wait
// budget.
type inProgressError struct {
	Attempts int           // claims made by this call
	Waited   time.Duration // time spent waiting
}

func (e *inProgressError) Error() string {
	return fmt.Sprintf("%v (still running after %d attempts in %v)", ErrInProgress, e.Attempts, e.Waited.Round(time.Millisecond))
}

func (e *inProgressError) Unwrap() error { return ErrInProgress }

// LiveClaimError is [Guard.Forget]'s refusal to delete a live claim
// without [Force]. It matches [ErrInProgress].
type LiveClaimError struct {
	ExpiresAt time.Time     // when the lease runs out unless renewed (the backend's clock)
	Fence     idemkit.Fence // the claim's fence
}

// Error describes the error, with the lease's expiry.
func (e *LiveClaimError) Error() string {
	return fmt.Sprintf("%v: its claim is live, its lease runs out at %s unless its holder renews it",
		ErrInProgress, e.ExpiresAt.UTC().Format(time.RFC3339Nano))
}

// Unwrap returns [ErrInProgress].
func (e *LiveClaimError) Unwrap() error { return ErrInProgress }

// mismatchError: the key was reused with another request.
type mismatchError struct {
	Stored string // the fingerprint recorded with the key
	Got    string // the fingerprint of this request
}

func (e *mismatchError) Error() string { return ErrMismatch.Error() }

func (e *mismatchError) Unwrap() error { return ErrMismatch }

// notReplayableError: the key's request ran; its response cannot be
// replayed.
type notReplayableError struct {
	CreatedAt time.Time     // when the execution was recorded
	Fence     idemkit.Fence // the fence it ran under
}

func (e *notReplayableError) Error() string { return ErrNotReplayable.Error() }

func (e *notReplayableError) Unwrap() error { return ErrNotReplayable }

// UnavailableError reports a backend failure. It matches [ErrUnavailable]
// and, through Err, the backend's [*idemkit.Error] and its native cause.
type UnavailableError struct {
	Op  string // "claim", "extend", "complete", "commit", "release", "check" or "decode"
	Err error
}

// Error describes the error; a backend that refuses service until its
// setup is fixed is said to be misconfigured.
func (e *UnavailableError) Error() string {
	if idemkit.CodeOf(e.Err).Permanent() {
		return fmt.Sprintf("idempotency: the idempotency backend is misconfigured: %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("%v: %s: %v", ErrUnavailable, e.Op, e.Err)
}

// Unwrap returns [ErrUnavailable] and the backend's error.
func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }
