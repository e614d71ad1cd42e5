package firestorelock_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/lock/firestorelock"
	"github.com/idemkit/idemkit/lock/firestorelock/firestoretest"
	"github.com/idemkit/idemkit/lock/locktest"
)

// margin is the real-clock suite's ε: comfortably more than a round trip
// to the local emulator (a few milliseconds, more under -race).
const margin = 200 * time.Millisecond

// env builds a locktest Env on a fresh project and a client of the
// locker's own, with probes on another client.
func env(t *testing.T, cfg locktest.Config, opts ...firestorelock.Option) *locktest.Env {
	p := firestoretest.Project(t)
	c := firestoretest.Client(t, p)
	opts = append(opts, firestorelock.WithCleanupInIsLocked(cfg.CleanupInIsLocked), firestorelock.WithLogger(cfg.Logger))
	l, err := firestorelock.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	warm(t, l)
	pr := newProbes(t, p, l)
	return &locktest.Env{
		Locker:     l,
		RaiseFence: pr.raiseFence, Fence: pr.fence, Stored: pr.stored,
		Break:           func() { _ = c.Close() },
		ExpiresNatively: false, // expired documents stay until replaced, swept, cleaned up or collected by a TTL policy
		// Restart is nil: the emulator keeps no data across restarts, so
		// the fence-survives-restart case does not apply to it (Firestore
		// itself is durable).
	}
}

// TestConformance runs the lock suite with an injected client clock, which
// is Firestore's time authority, so expiry boundaries are stepped exactly.
// The skew warning is off: the fake clock is far from the emulator's.
func TestConformance(t *testing.T) {
	locktest.Run(t, func(t *testing.T, cfg locktest.Config) *locktest.Env {
		clock := fakeclock.New()
		e := env(t, cfg, firestorelock.WithClock(clock.Now), firestorelock.WithSkewTolerance(0))
		e.Advance = clock.Advance
		return e
	})
}

// TestConformanceRealClock runs the suite again on the process clock, with
// sleeps and margins, and the skew monitor on (the emulator shares the
// machine's clock, so it must stay quiet).
func TestConformanceRealClock(t *testing.T) {
	locktest.Run(t, func(t *testing.T, cfg locktest.Config) *locktest.Env {
		e := env(t, cfg)
		e.Margin = margin
		return e
	})
}
