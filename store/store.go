package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
)

// State is what a record says about the request it belongs to.
type State uint8

const (
	// StateClaimed: a request holds the key and is running, under a
	// fence and a lease (ExpiresAt).
	StateClaimed State = iota + 1
	// StateCompleted: the work ran and its response is stored; retries get
	// it back.
	StateCompleted
	// StateNotReplayable: the work ran but its response cannot be replayed
	// (too large, streamed, hijacked). Retries are told so and the work is
	// never run again.
	StateNotReplayable
)

// String returns "claimed", "completed" or "not-replayable".
func (s State) String() string {
	switch s {
	case StateClaimed:
		return "claimed"
	case StateCompleted:
		return "completed"
	case StateNotReplayable:
		return "not-replayable"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Valid reports whether s is one of the defined states.
func (s State) Valid() bool { return s >= StateClaimed && s <= StateNotReplayable }

// Done reports whether s records an outcome: completed or not replayable.
func (s State) Done() bool { return s == StateCompleted || s == StateNotReplayable }

// Record is what a store keeps under one key: a claim while a request runs,
// then its outcome.
type Record struct {
	Key         string        // the record key (any bytes, at most MaxKeyBytes)
	Fingerprint string        // what the request asked for, in the fingerprint package's string form
	State       State         // claimed, completed, or executed-not-replayable
	Response    []byte        // the encoded response (the caller's encoding); empty for a claim, and for a not-replayable outcome unless its writer gave one (see Store.Complete)
	Fence       idemkit.Fence // the fence of the claim (for an outcome: of the claim that wrote it)
	CreatedAt   time.Time     // when the claim was made or the outcome written, by the store's clock
	ExpiresAt   time.Time     // a claim: when its lease runs out; an outcome: when it is forgotten

	// Steps are a claim's recorded steps, in order, on an engine that is
	// a [Stepper] (nil otherwise, and for an outcome).
	Steps []Step

	// Replaced is what a Claim that took over a record still holding a
	// response reports of it (see [Store.Claim]); never written.
	Replaced *Record
}

// Store is an engine: records that carry their own lease, for the guard
// and the lock library (see the package doc, which also states the rules
// of time, fences and expiry).
//
// All methods are safe for concurrent use, validate their arguments before
// any I/O (InvalidArgument: a key of 1 to [MaxKeyBytes] bytes, any bytes; a
// TTL of at least one millisecond; a fence other than zero; an outcome
// state for Complete; messages never repeat the key; package
// [github.com/idemkit/idemkit/store/engine] has the checks) and check ctx
// before any I/O (an ended ctx gives Aborted or NetworkTimeout). Failures
// are [*idemkit.Error] values; a busy key, a refused write and absence are
// results.
type Store interface {
	// Claim makes one attempt to claim key for a request whose
	// fingerprint is fp, with a lease of ttl: one round trip for a replay,
	// a busy key and a free key (an engine may take a second to take over
	// a record that is not live; its documentation says so).
	//
	// A completed or not-replayable record is returned as it is, with
	// claimed = false. A live claim is returned as it is (State
	// StateClaimed, its fingerprint, fence and lease expiry), with claimed
	// = false: the key is busy. Otherwise (no record, a claim whose lease
	// ran out, an outcome past its expiry) the store writes a new claim and
	// returns it with claimed = true: State StateClaimed, fp, a new fence
	// and ExpiresAt = now + ttl. A refused claim writes nothing, and neither
	// does a claim whose new fence would exceed [idemkit.FenceMax]: it
	// fails with Internal.
	//
	// A new claim that replaces a record still holding a non-empty
	// response, whatever its state says, reports that record's
	// fingerprint and response (nothing else) in Replaced, in the same
	// round trip, so that [Seal] can tell an outcome that expired from one
	// made to look free; every other Claim reports nil. Release, Delete
	// and a take-over leave no response behind, and a record the backend
	// already dropped at its expiry has nothing to report.
	// [github.com/idemkit/idemkit/middleware.Compose] reports nothing.
	Claim(ctx context.Context, key, fp string, ttl time.Duration) (rec Record, claimed bool, err error)

	// Extend sets the lease of the live claim (key, fence) to now + ttl
	// and returns that expiry, by the backend's clock, as Get would read
	// it: ok = false, and nothing written, once its lease ran out or
	// another claim, an outcome or nothing is there. A claim whose lease
	// ran out is free for anyone to claim, so it cannot be taken back.
	Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (expiresAt time.Time, ok bool, err error)

	// Complete writes the outcome rec (State StateCompleted with its
	// Response, or StateNotReplayable) under rec.Key for ttl and ends the
	// claim rec.Fence in the same atomic write, only while the record
	// still carries that claim: ok = false, and nothing written, once
	// another claim, an outcome or nothing is there. A claim whose lease
	// ran out still completes as long as nobody claimed the key since, so
	// a slow store is never a second execution. A response the backend
	// cannot hold fails with an error matching [ErrTooLarge], before any
	// write. The store sets CreatedAt and ExpiresAt. A Response given with
	// a not-replayable outcome is kept and returned as given, like a
	// completed one's ([Seal] puts its envelope there).
	Complete(ctx context.Context, rec Record, ttl time.Duration) (ok bool, err error)

	// Release removes the live claim (key, fence), storing nothing, only
	// while the record still carries it and its lease has not run out;
	// ok reports whether it did. The key can be claimed again at once.
	Release(ctx context.Context, key string, fence idemkit.Fence) (ok bool, err error)

	// Get returns the live record under key (a live claim or an outcome),
	// or ok = false. It never changes anything.
	Get(ctx context.Context, key string) (rec Record, ok bool, err error)

	// Delete removes the live record under key, whatever its state, and
	// reports whether there was one. A claim that is deleted can no longer
	// be extended, completed or released. It is for operators: a retry
	// after it runs the work again.
	Delete(ctx context.Context, key string) (deleted bool, err error)
}

// Records is a plain record store: outcomes only, without leases. It is the
// record half of [github.com/idemkit/idemkit/middleware.Compose], which
// pairs it with any lock provider to make a [Store] (for example PostgreSQL
// records with Redis locks). Records written by Put are completed or
// not-replayable records; Get and Delete behave as in [Store].
type Records interface {
	// Get returns the live record under key, or ok = false.
	Get(ctx context.Context, key string) (rec Record, ok bool, err error)

	// Put writes rec (State StateCompleted or StateNotReplayable) under
	// rec.Key for ttl, unless the live record there carries a higher
	// fence: then it writes nothing and returns ok = false. An equal or
	// lower fence, or no live record, is overwritten. The store sets
	// CreatedAt and ExpiresAt. A response the backend cannot hold fails
	// with an error matching [ErrTooLarge]. A not-replayable record's
	// Response, when it has one, is kept and returned as given.
	Put(ctx context.Context, rec Record, ttl time.Duration) (ok bool, err error)

	// Delete removes the live record under key and reports whether there
	// was one.
	Delete(ctx context.Context, key string) (deleted bool, err error)
}

// ClaimRetention is how long a store keeps a claim whose lease ran out
// (unless a new claim replaces it), so that a holder cut off from its store
// for a while still completes it rather than a retry running the work.
const ClaimRetention = time.Minute

// MaxKeyBytes is the longest record key every store accepts.
const MaxKeyBytes = 1024

// ErrTooLarge is matched (errors.Is) by a Complete or Put whose response is
// larger than the backend can hold. The error's code is InvalidArgument.
var ErrTooLarge = errors.New("store: response too large for the backend")
