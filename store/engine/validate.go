package engine

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// The argument checks the [store.Store] contract asks of every operation
// before any I/O. They return InvalidArgument [*idemkit.Error] values
// whose messages never repeat the key.

// Ready returns the first of checks that failed, or else what
// [idemkit.CheckContext] says of ctx: what every operation does before any
// I/O, e.g. Ready(ctx, "claim", ValidateKey(key), ValidateTTL("claim", ttl)).
func Ready(ctx context.Context, op string, checks ...error) error {
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	return idemkit.CheckContext(ctx, op)
}

// ValidateKey refuses a record key of 0 or more than [store.MaxKeyBytes] bytes.
// Any bytes are valid.
func ValidateKey(key string) error {
	if key == "" {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "validate", "record key must not be empty", nil)
	}
	if len(key) > store.MaxKeyBytes {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "validate", fmt.Sprintf("record key exceeds %d bytes (%d bytes)", store.MaxKeyBytes, len(key)), nil)
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
func ValidateComplete(rec store.Record, ttl time.Duration) error {
	if err := ValidateFenced("complete", rec.Key, rec.Fence); err != nil {
		return err
	}
	if !rec.State.Done() {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "complete", fmt.Sprintf("a completion needs an outcome state (got %v)", rec.State), nil)
	}
	return ValidateTTL("complete", ttl)
}

// ValidateStep checks a [store.Stepper.RecordStep]'s arguments: a valid
// key and fence, an index from 0 to [store.MaxSteps] − 1, a name of 1 to
// [store.MaxStepNameBytes] bytes of UTF-8, a step of at most
// [store.MaxStepBytes] (matching [store.ErrTooLarge] when over) and a keep
// of at least one millisecond.
func ValidateStep(key string, fence idemkit.Fence, index int, step store.Step, keep time.Duration) error {
	const op = "record-step"
	if err := ValidateFenced(op, key, fence); err != nil {
		return err
	}
	switch {
	case index < 0 || index >= store.MaxSteps:
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("step index must be 0 to %d (got %d)", store.MaxSteps-1, index), nil)
	case step.Name == "" || len(step.Name) > store.MaxStepNameBytes:
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("step name must be 1 to %d bytes (got %d)", store.MaxStepNameBytes, len(step.Name)), nil)
	case !utf8.ValidString(step.Name):
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, "step name must be UTF-8", nil)
	case step.Size() > store.MaxStepBytes:
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("step of %d bytes exceeds %d", step.Size(), store.MaxStepBytes), store.ErrTooLarge)
	}
	return ValidateTTL(op, keep)
}

// TooLarge is the error a store reports for a response of size bytes above
// its limit: InvalidArgument, matching [store.ErrTooLarge].
func TooLarge(op string, size, limit int) error {
	return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("response of %d bytes exceeds the store's limit of %d", size, limit), store.ErrTooLarge)
}

// ValidateList refuses a [store.Lister.List] limit outside 1 to
// [store.MaxListLimit].
func ValidateList(limit int) error {
	if limit < 1 || limit > store.MaxListLimit {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "list", fmt.Sprintf("limit must be 1 to %d (got %d)", store.MaxListLimit, limit), nil)
	}
	return nil
}
