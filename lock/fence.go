package lock

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idemkit"
)

// Fence is a fencing token: per key, every lease gets a fence greater than
// all the key's earlier ones, through release, expiry, cleanup and restart
// ([NextFence], [KeepUntil]), and it never wraps. A fence is at least the
// backend's clock in Unix milliseconds at the acquire, so consecutive fences
// of a key are increasing but not consecutive. A resource that records the
// highest fence it has seen and refuses writes carrying a lower one is safe
// from a holder whose lease ran out unnoticed.
//
// Its string form is 15 zero-padded decimal digits, so string order equals
// numeric order; [ParseFence] reverses it.
type Fence uint64

// Fence limits. A backend warns (through its logger, never printing the raw
// key) when it issues a fence above FenceWarn, and refuses to issue one above
// FenceMax, atomically: the acquire fails with Internal and nothing is
// written.
const (
	FenceWarn Fence = 90_000_000_000_000  // 9×10^13
	FenceMax  Fence = 900_000_000_000_000 // 9×10^14
)

// FenceDigits is the width of a fence's string form.
const FenceDigits = 15

// String returns the fence as 15 zero-padded decimal digits.
func (f Fence) String() string {
	return fmt.Sprintf("%015d", uint64(f))
}

// Uint64 returns the fence as a number.
func (f Fence) Uint64() uint64 { return uint64(f) }

// Compare returns -1, 0 or +1 as f is older than, equal to or newer than g.
func (f Fence) Compare(g Fence) int {
	switch {
	case f < g:
		return -1
	case f > g:
		return 1
	}
	return 0
}

// ParseFence parses the 15-digit string form of a fence. Anything else
// (another length, a sign, a non-digit) is an InvalidArgument error.
func ParseFence(s string) (Fence, error) {
	if len(s) != FenceDigits {
		return 0, invalid("parse-fence", fmt.Sprintf("fence must be %d digits (got %d bytes)", FenceDigits, len(s)))
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, invalid("parse-fence", "fence must be decimal digits")
		}
		v = v*10 + uint64(c-'0')
	}
	return Fence(v), nil
}

// MarshalText implements encoding.TextMarshaler with the 15-digit form.
func (f Fence) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with [ParseFence].
func (f *Fence) UnmarshalText(b []byte) error {
	v, err := ParseFence(string(b))
	if err != nil {
		return err
	}
	*f = v
	return nil
}

// CheckFence is what a backend calls with the fence it is about to issue for
// key, before writing anything. Above [FenceMax] it returns an Internal
// error and the backend must abandon the acquire without writing. Above
// [FenceWarn] it logs a warning on logger (if not nil) that names the key
// only by its hash under hasher (the default hasher if nil).
func CheckFence(ctx context.Context, logger *slog.Logger, hasher Hasher, key string, f Fence) error {
	if f > FenceMax {
		return idemkit.NewError(idemkit.CodeInternal, "acquire", fmt.Sprintf("fence overflow: next fence %s exceeds the maximum %s", f, FenceMax), nil)
	}
	if f > FenceWarn && logger != nil {
		if hasher == nil {
			hasher = processHasher
		}
		logger.WarnContext(ctx, "lock: fence approaching its limit",
			slog.String("key_hash", hasher.Hash(key)),
			slog.String("fence", f.String()),
			slog.String("max", FenceMax.String()))
	}
	return nil
}

// NextFence returns the fence of a new lease on a key whose lock record
// (live, expired or a tombstone) carries the fence prev, or 0 when the key
// has none: max(prev+1, now in Unix milliseconds), with now read from the
// backend's clock. No counter is kept: because a record is never removed
// before [KeepUntil], a key's next fence is greater than every fence it
// carried, whatever was released, expired, cleaned up or restarted.
func NextFence(prev Fence, now time.Time) Fence {
	return max(prev+1, Fence(max(now.UnixMilli(), 0)))
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
func KeepUntil(f Fence, expiresAt time.Time) time.Time {
	until := time.UnixMilli(int64(min(f, FenceMax+1)) + 1)
	if expiresAt.After(until) {
		return expiresAt
	}
	return until
}

func invalid(op, detail string) error {
	return idemkit.NewError(idemkit.CodeInvalidArgument, op, detail, nil)
}
