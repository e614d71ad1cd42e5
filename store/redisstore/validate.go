package redisstore

import (
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/store"
)

// The argument checks every operation makes before any I/O, as
// [store.Store] asks: InvalidArgument errors whose messages never repeat
// the key.

// validateKey refuses a key of 0 or more than [store.MaxKeyBytes] bytes.
func validateKey(key string) error {
	if key == "" {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "validate", "record key must not be empty", nil)
	}
	if len(key) > store.MaxKeyBytes {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "validate", fmt.Sprintf("record key exceeds %d bytes (%d bytes)", store.MaxKeyBytes, len(key)), nil)
	}
	return nil
}

// validateTTL refuses a TTL under one millisecond.
func validateTTL(op string, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("ttl must be at least 1ms (got %v)", ttl), nil)
	}
	return nil
}

// validateFenced checks the key and fence of Extend, Complete and Release.
func validateFenced(op, key string, fence lock.Fence) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if fence == 0 {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, "fence must not be zero", nil)
	}
	return nil
}

// validateComplete checks a Complete's key, fence, outcome state and TTL.
func validateComplete(rec store.Record, ttl time.Duration) error {
	if err := validateFenced("complete", rec.Key, rec.Fence); err != nil {
		return err
	}
	if !rec.State.Done() {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "complete", fmt.Sprintf("a completion needs an outcome state (got %v)", rec.State), nil)
	}
	return validateTTL("complete", ttl)
}

// tooLarge is the error of a response of size bytes above limit.
func tooLarge(op string, size, limit int) error {
	return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("response of %d bytes exceeds the store's limit of %d", size, limit), store.ErrTooLarge)
}
