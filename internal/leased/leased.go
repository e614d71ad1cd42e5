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
