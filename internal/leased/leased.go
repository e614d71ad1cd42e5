package leased

import (
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/store"
)

// ValidateKey returns an InvalidArgument error unless key has 1 to
// [store.MaxKeyBytes] bytes. Messages never repeat the key.
func ValidateKey(key string) error {
	if key == "" {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "validate", "record key must not be empty", nil)
	}
	if len(key) > store.MaxKeyBytes {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "validate", fmt.Sprintf("record key exceeds %d bytes (%d bytes)", store.MaxKeyBytes, len(key)), nil)
	}
	return nil
}

// ValidateTTL returns an InvalidArgument error unless ttl is at least one
// millisecond.
func ValidateTTL(op string, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("ttl must be at least 1ms (got %v)", ttl), nil)
	}
	return nil
}

// ValidateClaim checks a Claim's arguments: a valid key and TTL.
func ValidateClaim(key string, ttl time.Duration) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return ValidateTTL("claim", ttl)
}

// ValidateFenced checks the arguments of Extend and Release (and
// Complete's key and fence): a valid key and a fence of at least 1.
func ValidateFenced(op, key string, fence lock.Fence) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if fence == 0 {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, "fence must not be zero", nil)
	}
	return nil
}

// ValidateComplete checks a Complete's arguments: a valid key and fence, an
// outcome state (completed or not replayable) and a TTL of at least one
// millisecond.
func ValidateComplete(rec store.Record, ttl time.Duration) error {
	if err := ValidateFenced("complete", rec.Key, rec.Fence); err != nil {
		return err
	}
	if !rec.State.Done() {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "complete", fmt.Sprintf("a completion needs an outcome state (got %v)", rec.State), nil)
	}
	return ValidateTTL("complete", ttl)
}

// TooLarge returns the error a store reports for a response of size bytes
// above its limit: InvalidArgument, matching [store.ErrTooLarge].
func TooLarge(op string, size, limit int) error {
	return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("response of %d bytes exceeds the store's limit of %d", size, limit), store.ErrTooLarge)
}

// NextFence returns the fence of a new claim: prev + 1, or the store's
// clock in Unix milliseconds if that is greater. prev is the fence of the
// record the claim replaces (0 when there is none). See [store.Store] for
// why this keeps fences growing without a counter.
func NextFence(prev lock.Fence, now time.Time) lock.Fence {
	return max(prev+1, lock.Fence(now.UnixMilli()))
}

// KeepUntil returns when a store may remove a record: not before its
// ExpiresAt (plus [store.ClaimRetention] for a claim), and not before the
// store's clock has passed the record's fence read as Unix milliseconds.
func KeepUntil(rec store.Record) time.Time {
	until := rec.ExpiresAt
	if rec.State == store.StateClaimed {
		until = until.Add(store.ClaimRetention)
	}
	if f := time.UnixMilli(int64(rec.Fence) + 1); f.After(until) {
		return f
	}
	return until
}
