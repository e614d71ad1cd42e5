package middleware

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
)

// Sentinels. Every error the guard returns for a request it refused matches
// exactly one of them with errors.Is.
var (
	// ErrInProgress: another request with the same key holds its claim:
	// it did not finish within the wait budget ([InProgressError]), or
	// [Guard.Forget] refused to delete it ([LiveClaimError]). Retry later
	// (HTTP 409).
	ErrInProgress = errors.New("idempotency: a request with this key is in progress")
	// ErrMismatch: the key was already used for a different request (HTTP
	// 422). Never retry with this key.
	ErrMismatch = errors.New("idempotency: the key was used for a different request")
	// ErrNotReplayable: the request was executed, but its response could
	// not be recorded for replay (too large, streamed, hijacked). It will
	// never be executed again under this key (HTTP 409).
	ErrNotReplayable = errors.New("idempotency: the request was executed but its response cannot be replayed")
	// ErrUnavailable: the backend failed or did not answer in time, so the guard
	// cannot tell whether the request already ran (HTTP 503). When the
	// backend refuses the service until its setup is fixed (the code of
	// the error is idemkit.CodeAuthFailed or idemkit.CodeMisconfigured),
	// retrying cannot help: the adapters answer HTTP 500 (gRPC Internal).
	// The guard logs the cause (see [WithLogger]).
	ErrUnavailable = errors.New("idempotency: the idempotency backend is unavailable")
	// ErrCredentialsMismatch: the key's record was written by a call with
	// other credentials (see [Credentials]): the stored response is never
	// handed to this caller, and the work does not run again (HTTP 422). It
	// does not match [ErrMismatch], and it tells nothing of the recorded
	// request.
	ErrCredentialsMismatch = errors.New("idempotency: the key was used with other credentials")
	// ErrInvalidKey: the key is empty or otherwise unusable.
	ErrInvalidKey = errors.New("idempotency: invalid key")
)

// InProgressError is the in-progress error: another request with the same
// key and payload held its claim for the whole wait budget. It matches
// [ErrInProgress].
type InProgressError struct {
	Attempts int           // claims made by this call
	Waited   time.Duration // time spent waiting
}

// Error describes the error.
func (e *InProgressError) Error() string {
	return fmt.Sprintf("%v (still running after %d attempts in %v)", ErrInProgress, e.Attempts, e.Waited.Round(time.Millisecond))
}

// Unwrap returns [ErrInProgress].
func (e *InProgressError) Unwrap() error { return ErrInProgress }

// LiveClaimError is [Guard.Forget]'s refusal to delete a live claim (see
// [Force]): a request holds the key and may still be running its work. It
// matches [ErrInProgress].
type LiveClaimError struct {
	ExpiresAt time.Time     // when the claim's lease runs out unless its holder renews it (the backend's clock)
	Fence     idemkit.Fence // the claim's fence
}

// Error describes the error, with the lease's expiry.
func (e *LiveClaimError) Error() string {
	return fmt.Sprintf("%v: its claim is live, its lease runs out at %s unless its holder renews it",
		ErrInProgress, e.ExpiresAt.UTC().Format(time.RFC3339Nano))
}

// Unwrap returns [ErrInProgress].
func (e *LiveClaimError) Unwrap() error { return ErrInProgress }

// MismatchError reports a key reused with another request. It matches
// [ErrMismatch].
type MismatchError struct {
	Stored string // the fingerprint recorded with the key
	Got    string // the fingerprint of this request
}

// Error describes the error.
func (e *MismatchError) Error() string { return ErrMismatch.Error() }

// Unwrap returns [ErrMismatch].
func (e *MismatchError) Unwrap() error { return ErrMismatch }

// NotReplayableError reports that the key's request ran but its response
// cannot be replayed. It matches [ErrNotReplayable].
type NotReplayableError struct {
	CreatedAt time.Time     // when the execution was recorded
	Fence     idemkit.Fence // the fence it ran under
}

// Error describes the error.
func (e *NotReplayableError) Error() string { return ErrNotReplayable.Error() }

// Unwrap returns [ErrNotReplayable].
func (e *NotReplayableError) Unwrap() error { return ErrNotReplayable }

// UnavailableError reports a backend failure. It matches [ErrUnavailable]
// and, through Err, the backend's coded error ([idemkit.Error]) and its native
// cause.
type UnavailableError struct {
	Op  string // "claim", "extend", "complete", "release"
	Err error
}

// Error describes the error. A backend that refuses the service until its
// setup is fixed (idemkit.CodeAuthFailed, idemkit.CodeMisconfigured) is
// said to be misconfigured rather than unavailable.
func (e *UnavailableError) Error() string {
	if idemkit.CodeOf(e.Err).Permanent() {
		return fmt.Sprintf("idempotency: the idempotency backend is misconfigured: %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("%v: %s: %v", ErrUnavailable, e.Op, e.Err)
}

// Unwrap returns [ErrUnavailable] and the backend's error.
func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }
