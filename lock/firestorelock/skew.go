package firestorelock

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/lock"
)

// DefaultSkewTolerance is the default of [WithSkewTolerance].
const DefaultSkewTolerance = 500 * time.Millisecond

// skewWarnEvery is how often a SkewMonitor logs at most: a skewed clock
// stays skewed, and one line a minute is enough to see it.
const skewWarnEvery = time.Minute

// SkewMonitor compares the time at which Firestore says a write happened
// (the update time it returns, by Google's clock) with the client's clock
// around that write, and logs a warning when they differ by more than a
// tolerance. Its zero value is not usable; build it with [NewSkewMonitor].
//
// The client's clock judges expiry on Firestore (see the package
// documentation), so a client whose clock runs ahead releases its leases
// early in everyone else's eyes, and one whose clock runs behind keeps
// them too long. The write's server time lies between the client's clock
// reading before the call was sent and the one after its answer arrived
// when the clocks agree; the skew is how far outside that window it falls
// (0 inside it), so a slow round trip is never mistaken for skew.
//
// A SkewMonitor is safe for concurrent use. The locker keeps one and so
// does a store built on this package's building blocks.
type SkewMonitor struct {
	logger    *slog.Logger
	hasher    lock.Hasher
	tolerance time.Duration
	last      atomic.Int64 // the last measured skew, ns
	lastWarn  atomic.Int64 // when the last warning was logged (client clock, Unix ns)
}

// NewSkewMonitor returns a monitor that logs on logger (nil means
// slog.Default()), names keys by their hash under hasher (nil means
// lock.DefaultHasher()), and warns when the skew exceeds tolerance; a
// tolerance of 0 or less turns the warnings off (the skew is still
// measured).
func NewSkewMonitor(logger *slog.Logger, hasher lock.Hasher, tolerance time.Duration) *SkewMonitor {
	if logger == nil {
		logger = slog.Default()
	}
	if hasher == nil {
		hasher = lock.DefaultHasher()
	}
	return &SkewMonitor{logger: logger, hasher: hasher, tolerance: tolerance}
}

// Observe records the skew of one write of key by op: sent and received
// are the client's clock readings before the write was sent and after its
// answer arrived, server is the update time Firestore returned. A zero
// server time (a delete reports none) is ignored. Above the tolerance it
// logs a warning with the op, the key's hash, the skew and the tolerance,
// at most once a minute.
func (m *SkewMonitor) Observe(ctx context.Context, op, key string, sent, received, server time.Time) {
	if m == nil || server.IsZero() {
		return
	}
	var skew time.Duration
	switch {
	case server.Before(sent):
		skew = server.Sub(sent) // the client's clock is ahead
	case server.After(received):
		skew = server.Sub(received) // the client's clock is behind
	}
	m.last.Store(int64(skew))
	if m.tolerance <= 0 || (skew <= m.tolerance && skew >= -m.tolerance) {
		return
	}
	now := received.UnixNano()
	prev := m.lastWarn.Load()
	if prev != 0 && now-prev < int64(skewWarnEvery) && now >= prev {
		return
	}
	if !m.lastWarn.CompareAndSwap(prev, now) {
		return // another goroutine is warning
	}
	m.logger.WarnContext(ctx, "firestorelock: the client clock differs from Firestore's; leases are judged by the client clock, keep it synchronised (NTP)",
		slog.String("op", op),
		slog.String("key_hash", m.hasher.Hash(key)),
		slog.Duration("skew", skew),
		slog.Duration("tolerance", m.tolerance))
}

// Last returns the skew measured at the last write: positive when
// Firestore's clock is ahead of the client's (the client's is behind),
// negative when the client's is ahead, 0 within the round trip (or before
// any write).
func (m *SkewMonitor) Last() time.Duration {
	if m == nil {
		return 0
	}
	return time.Duration(m.last.Load())
}
