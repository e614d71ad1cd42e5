package firestorestore_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/firestorelock"
	"github.com/idemkit/idemkit/lock/firestorelock/firestoretest"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/middleware/guardtest"
	"github.com/idemkit/idemkit/store/firestorestore"
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestExactlyOnceAcrossNodes races 16 goroutines over 3 guards on the
// emulator, each guard with a Firestore client of its own (its own
// connection, as a separate process would have), its own firestorelock
// Locker and its own Store, on one key, 10 times with fresh keys
// (guardtest.ExactlyOnce): every time the work runs exactly once, every
// other caller gets its response replayed (or, past the wait budget, is
// told the request is in progress), and afterwards every node replays it.
func TestExactlyOnceAcrossNodes(t *testing.T) {
	t.Parallel()
	project := testenv.FirestoreProject(t)
	const nodes = 3
	guards := make([]*middleware.Guard, nodes)
	for i := range guards {
		c := firestoretest.Client(t, project)
		s := newStore(t, c, firestorestore.WithLogger(discard()))
		l, err := firestorelock.New(c, firestorelock.WithLogger(discard()))
		if err != nil {
			t.Fatal(err)
		}
		// Duplicates poll the lock (Firestore cannot wake them on a
		// release) and look for the record between polls; contended
		// transactions on the emulator take seconds, so the budgets are
		// generous.
		g, err := middleware.New(s, l, middleware.WithLogger(discard()),
			middleware.WithWaitBudget(2*time.Minute), middleware.WithLockRetries(100000),
			middleware.WithBaseDelay(10*time.Millisecond), middleware.WithMaxDelay(100*time.Millisecond),
			middleware.WithOpTimeout(30*time.Second), middleware.WithRecordWriteTimeout(2*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		guards[i] = g
	}
	guardtest.ExactlyOnce(t, guards, guardtest.Race{Callers: 16, Rounds: 10, KeyPrefix: "order-", InProgressOK: true})
}
