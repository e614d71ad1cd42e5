package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// State is what a record says about the execution it records.
type State uint8

const (
	// StateCompleted: the work ran and its response is stored; retries get
	// it back.
	StateCompleted State = iota + 1
	// StateNotReplayable: the work ran but its response cannot be replayed
	// (too large, streamed, hijacked). Retries are told so and the work is
	// never run again.
	StateNotReplayable
)

// String returns "completed" or "not-replayable".
func (s State) String() string {
	switch s {
	case StateCompleted:
		return "completed"
	case StateNotReplayable:
		return "not-replayable"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Valid reports whether s is one of the defined states.
func (s State) Valid() bool { return s == StateCompleted || s == StateNotReplayable }

// Record is one recorded execution.
type Record struct {
	Key         string     // the record key (any bytes, at most MaxKeyBytes)
	Fingerprint string     // what the request asked for, in the fingerprint package's string form
	State       State      // completed, or executed-not-replayable
	Response    []byte     // the encoded response (the caller's encoding); empty when not replayable
	Fence       lock.Fence // the fence of the lease under which it was written
	CreatedAt   time.Time  // set by the store when the record is written, by its clock
	ExpiresAt   time.Time  // CreatedAt + the TTL given to Put
}

// Store is the contract every record store implements. All methods are safe
// for concurrent use, check ctx before any I/O (an ended ctx gives Aborted or
// NetworkTimeout) and validate arguments before any I/O (InvalidArgument).
// Failures are [*idemkit.Error] values with a [idemkit.Code]; absence and a
// fence refusal are results.
//
// Expiry follows the lock layer's rule: a record is visible while now <
// ExpiresAt by the store's clock, and gone from ExpiresAt on.
type Store interface {
	// Get returns the live record under key, or ok = false.
	Get(ctx context.Context, key string) (rec Record, ok bool, err error)

	// Put writes rec under rec.Key for ttl, unless the live record there
	// carries a higher fence: then it writes nothing and returns ok =
	// false. An equal or lower stored fence, or no live record, is
	// overwritten. The store sets CreatedAt and ExpiresAt. A response the
	// backend cannot hold fails with an error matching [ErrTooLarge].
	Put(ctx context.Context, rec Record, ttl time.Duration) (ok bool, err error)

	// Delete removes the record under key and reports whether a live one
	// was there.
	Delete(ctx context.Context, key string) (deleted bool, err error)
}

// Combiner is an optional interface of a [Store] that shares a server with
// a locker and can fold lock operations into its own round trips. The guard
// then takes the lock and reads the record under it in one round trip, and
// writes the record and releases the lock in another: a first execution
// costs three round trips instead of five.
//
// The guard uses it only when Combines reports true for its locker, and
// passes lock and record keys that share a Redis-style hash tag ("{...}"),
// so that a clustered backend finds both on one node.
type Combiner interface {
	// Combines reports whether this store can take and release the locks
	// of l itself: the same server, the same key layout.
	Combines(l lock.Locker) bool

	// AcquireGet behaves as l.Acquire(ctx, lockKey, ttl) and, when it
	// acquired, as Get(ctx, recordKey) under the new lease, in one round
	// trip.
	AcquireGet(ctx context.Context, lockKey string, ttl time.Duration, recordKey string) (lease lock.Lease, acquired bool, rec Record, found bool, err error)

	// PutRelease behaves as Put(ctx, rec, ttl) followed, when that did not
	// fail, by releasing lease, in one round trip. stored is Put's answer;
	// the release is attempted whether or not a higher fence refused the
	// write. On an error nothing is released and the caller falls back to
	// separate calls.
	PutRelease(ctx context.Context, rec Record, ttl time.Duration, lease lock.Lease) (stored bool, released lock.Outcome, err error)
}

// MaxKeyBytes is the longest record key every store accepts.
const MaxKeyBytes = 1024

// ErrTooLarge is matched (errors.Is) by a Put whose response is larger than
// the backend can hold. The error's code is InvalidArgument.
var ErrTooLarge = errors.New("store: response too large for the backend")

// ValidatePut checks a Put's arguments: a key of 1 to [MaxKeyBytes] bytes
// (any bytes), a defined state and a TTL of at least one millisecond. It
// returns an InvalidArgument error; messages never repeat the key.
func ValidatePut(rec Record, ttl time.Duration) error {
	if err := ValidateKey(rec.Key); err != nil {
		return err
	}
	if !rec.State.Valid() {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "put", fmt.Sprintf("invalid record state %d", rec.State), nil)
	}
	if ttl < time.Millisecond {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "put", fmt.Sprintf("ttl must be at least 1ms (got %v)", ttl), nil)
	}
	return nil
}

// ValidateKey returns an InvalidArgument error unless key has 1 to
// [MaxKeyBytes] bytes.
func ValidateKey(key string) error {
	if key == "" {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "validate", "record key must not be empty", nil)
	}
	if len(key) > MaxKeyBytes {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "validate", fmt.Sprintf("record key exceeds %d bytes (%d bytes)", MaxKeyBytes, len(key)), nil)
	}
	return nil
}

// TooLarge returns the error a store reports for a response of size bytes
// above its limit.
func TooLarge(op string, size, limit int) error {
	return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("response of %d bytes exceeds the store's limit of %d", size, limit), ErrTooLarge)
}
