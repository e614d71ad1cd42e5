package firestorelock_test

import (
	"testing"

	"github.com/idemkit/idemkit/lock/firestorelock"
	"github.com/idemkit/idemkit/lock/locktest"
)

// TestConformance runs the lock suite on the emulator. Firestore's read
// and commit times judge every lease and cannot be injected, so the suite
// runs on the real clock, with sleeps and margins.
func TestConformance(t *testing.T) {
	locktest.Run(t, func(t *testing.T, cfg locktest.Config) *locktest.Env {
		p := project(t)
		c := client(t, p)
		l, err := firestorelock.New(c, firestorelock.WithCleanupInIsLocked(cfg.CleanupInIsLocked), firestorelock.WithLogger(cfg.Logger))
		if err != nil {
			t.Fatal(err)
		}
		warm(t, l)
		pr := newProbes(t, p, l)
		return &locktest.Env{
			Locker:     l,
			Margin:     margin,
			RaiseFence: pr.raiseFence, Fence: pr.fence, Stored: pr.stored,
			Keys:            pr.immortal,
			Break:           func() { _ = c.Close() },
			ExpiresNatively: false, // expired documents stay until replaced, swept, cleaned up or collected by a TTL policy
			// Restart is nil: the emulator keeps no data across restarts, so
			// the fence-survives-restart case does not apply to it (Firestore
			// itself is durable).
		}
	})
}
