package store

import (
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// The argument checks of [Compose]'s store, which every [Store] makes
// before any I/O. Messages never repeat the key.

func validateKey(key string) error {
	if key == "" {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "validate", "record key must not be empty", nil)
	}
	if len(key) > MaxKeyBytes {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "validate", fmt.Sprintf("record key exceeds %d bytes (%d bytes)", MaxKeyBytes, len(key)), nil)
	}
	return nil
}

func validateTTL(op string, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("ttl must be at least 1ms (got %v)", ttl), nil)
	}
	return nil
}

func validateFenced(op, key string, fence lock.Fence) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if fence == 0 {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, "fence must not be zero", nil)
	}
	return nil
}

func validateComplete(rec Record, ttl time.Duration) error {
	if err := validateFenced("complete", rec.Key, rec.Fence); err != nil {
		return err
	}
	if !rec.State.Done() {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "complete", fmt.Sprintf("a completion needs an outcome state (got %v)", rec.State), nil)
	}
	return validateTTL("complete", ttl)
}
