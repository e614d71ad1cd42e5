package leased

import (
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// NextFence returns the fence of a new claim: prev + 1, or the store's
// clock in Unix milliseconds if that is greater. prev is the fence of the
// record the claim replaces (0 when there is none). See [store.Store] for
// why this keeps fences growing without a counter.
func NextFence(prev idemkit.Fence, now time.Time) idemkit.Fence {
	return max(prev+1, idemkit.Fence(now.UnixMilli()))
}

// DefaultMaxClockStep is the engines' default largest clock step (see
// [store.Store]).
const DefaultMaxClockStep = time.Minute

// KeepUntil returns when a store may remove a record: not before its
// ExpiresAt (plus [store.ClaimRetention] for a claim), and not before the
// store's clock has passed the record's fence read as Unix milliseconds
// plus step, the store's largest clock step.
func KeepUntil(rec store.Record, step time.Duration) time.Time {
	until := rec.ExpiresAt
	if rec.State == store.StateClaimed {
		until = until.Add(store.ClaimRetention)
	}
	if f := FenceFloor(rec.Fence, step); f.After(until) {
		return f
	}
	return until
}

// FenceFloor returns when a tombstone of fence may go: once the store's
// clock has passed the fence, read as Unix milliseconds, plus step.
func FenceFloor(f idemkit.Fence, step time.Duration) time.Time {
	return time.UnixMilli(int64(f) + 1).Add(step)
}
