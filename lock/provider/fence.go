package provider

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idemkit"
)

// CheckFence is what a backend calls with the fence it is about to issue for
// key, before writing anything. Above [idemkit.FenceMax] it returns an Internal
// error and the backend must abandon the acquire without writing. Above
// [idemkit.FenceWarn] it logs a warning on logger (if not nil) that names the key
// only by its hash under hasher (the default hasher if nil).
func CheckFence(ctx context.Context, logger *slog.Logger, hasher idemkit.Hasher, key string, f idemkit.Fence) error {
	if f > idemkit.FenceMax {
		return idemkit.NewError(idemkit.CodeInternal, "acquire", fmt.Sprintf("fence overflow: next fence %s exceeds the maximum %s", f, idemkit.FenceMax), nil)
	}
	if f > idemkit.FenceWarn && logger != nil {
		if hasher == nil {
			hasher = idemkit.DefaultHasher()
		}
		logger.WarnContext(ctx, "lock: fence approaching its limit",
			slog.String("key_hash", hasher.Hash(key)),
			slog.String("fence", f.String()),
			slog.String("max", idemkit.FenceMax.String()))
	}
	return nil
}

// NextFence returns the fence of a new lease on a key whose lock record
// (live, expired or a tombstone) carries the fence prev, or 0 when the key
// has none: max(prev+1, now in Unix milliseconds), with now read from the
// backend's clock. No counter is kept: because a record is never removed
// before [KeepUntil], a key's next fence is greater than every fence it
// carried, whatever was released, expired, cleaned up or restarted.
func NextFence(prev idemkit.Fence, now time.Time) idemkit.Fence {
	return max(prev+1, idemkit.Fence(max(now.UnixMilli(), 0)))
}

// KeepUntil returns the earliest instant, by the backend's clock, at which
// a lock record with fence f whose lease expires at expiresAt may be
// physically removed: not before expiresAt, and not before the clock has
// passed f read as Unix milliseconds. Pass the zero time as expiresAt for a
// released lease.
//
// A release, cleanup or sweep before that instant must leave a tombstone:
// the fence alone, not live, not findable by lock id, acquirable, that the
// backend removes (or lets expire) at KeepUntil(f, time.Time{}). So every
// record and tombstone has an expiry and [NextFence] still issues a greater
// fence after it is gone.
func KeepUntil(f idemkit.Fence, expiresAt time.Time) time.Time {
	until := time.UnixMilli(int64(min(f, idemkit.FenceMax+1)) + 1)
	if expiresAt.After(until) {
		return expiresAt
	}
	return until
}
