package firestorestore_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/firestorelock/firestoretest"
	"github.com/idemkit/idemkit/store/firestorestore"
	"github.com/idemkit/idemkit/store/storetest"
)

// suiteMaxResponse is the response limit the suite checks: above its 900
// KiB case, below what a record document holds.
const suiteMaxResponse = 1000 << 10

// fakeMaxResponse is the response limit of the fake-clock run: another
// value than the real-clock run's, with the suite's 900 KiB case above it.
const fakeMaxResponse = 512 << 10

// TestConformance runs the store suite against the emulator with the real
// clock, each case on a project of its own with a client of its own (Break
// closes it).
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		c := firestoretest.Client(t, testenv.FirestoreProject(t))
		s := newStore(t, c, firestorestore.WithMaxResponseBytes(suiteMaxResponse))
		return &storetest.Env{
			Store:            s,
			Margin:           150 * time.Millisecond, // several round trips to the emulator
			Break:            func() { _ = c.Close() },
			MaxResponseBytes: suiteMaxResponse,
		}
	})
}

// TestConformanceFakeClock runs the suite again with an injected clock:
// the client clock is Firestore's time authority, so moving it moves
// every expiry exactly, at and around the boundary.
func TestConformanceFakeClock(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		c := firestoretest.Client(t, testenv.FirestoreProject(t))
		clock := fakeclock.New()
		s := newStore(t, c, firestorestore.WithClock(clock.Now), firestorestore.WithSkewTolerance(0),
			firestorestore.WithCollection("records"), firestorestore.WithMaxResponseBytes(fakeMaxResponse))
		return &storetest.Env{
			Store:            s,
			Advance:          clock.Advance,
			Break:            func() { _ = c.Close() },
			MaxResponseBytes: fakeMaxResponse,
		}
	})
}
