package store

import (
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
)

// The argument checks the [Store] contract asks of every operation before
// any I/O. Every store of this repository makes them with these functions,
// and a backend of your own can too. They return InvalidArgument
// [*idemkit.Error] values whose messages never repeat the key.

// ValidateKey refuses a record key of 0 or more than [MaxKeyBytes] bytes.
// Any bytes are valid.
func ValidateKey(key string) error {
	if key == "" {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "validate", "record key must not be empty", nil)
	}
	if len(key) > MaxKeyBytes {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "validate", fmt.Sprintf("record key exceeds %d bytes (%d bytes)", MaxKeyBytes, len(key)), nil)
	}
	return nil
}

// ValidateTTL refuses a TTL under one millisecond; op names the operation
// in the error.
func ValidateTTL(op string, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("ttl must be at least 1ms (got %v)", ttl), nil)
	}
	return nil
}

// ValidateFenced checks the key and fence of Extend, Complete and Release:
// a valid key and a fence other than zero.
func ValidateFenced(op, key string, fence idemkit.Fence) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if fence == 0 {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, "fence must not be zero", nil)
	}
	return nil
}

// ValidateComplete checks a Complete's arguments: a valid key and fence,
// an outcome state (completed or not replayable) and a TTL of at least one
// millisecond.
func ValidateComplete(rec Record, ttl time.Duration) error {
	if err := ValidateFenced("complete", rec.Key, rec.Fence); err != nil {
		return err
	}
	if !rec.State.Done() {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "complete", fmt.Sprintf("a completion needs an outcome state (got %v)", rec.State), nil)
	}
	return ValidateTTL("complete", ttl)
}

// TooLarge is the error a store reports for a response of size bytes above
// its limit: InvalidArgument, matching [ErrTooLarge].
func TooLarge(op string, size, limit int) error {
	return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("response of %d bytes exceeds the store's limit of %d", size, limit), ErrTooLarge)
}
