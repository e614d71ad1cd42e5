package firestorestore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/firestorelock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/firestorestore"
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestExactlyOnceAcrossNodes races 16 goroutines over 3 guards on the
// emulator, each guard with a Firestore client of its own (its own
// connection, as a separate process would have), its own firestorelock
// Locker and its own Store, on one key, 10 times with fresh keys: every
// time the work runs exactly once, every other caller gets its response
// replayed (or, past the wait budget, is told the request is in
// progress), and afterwards every node replays it.
func TestExactlyOnceAcrossNodes(t *testing.T) {
	t.Parallel()
	project := testenv.FirestoreProject(t)
	const nodes = 3
	guards := make([]*middleware.Guard, nodes)
	for i := range guards {
		c := newClient(t, project)
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
	fp, err := fingerprint.Value("the same request")
	if err != nil {
		t.Fatal(err)
	}
	const (
		rounds  = 10
		callers = 16
	)
	for round := range rounds {
		key := fmt.Sprintf("order-%d", round)
		want := "charged " + key
		var executions, replays, inProgress atomic.Int32
		errs := make(chan error, callers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				out, err := guards[i%nodes].Execute(t.Context(), key, fp, func(context.Context) (middleware.Result, error) {
					executions.Add(1)
					return middleware.Result{Value: []byte(want)}, nil
				})
				switch {
				case errors.Is(err, middleware.ErrInProgress):
					inProgress.Add(1)
				case err != nil:
					errs <- err
				case string(out.Value) != want:
					errs <- fmt.Errorf("response %q; want %q", out.Value, want)
				case out.Replayed:
					replays.Add(1)
				case !out.Recorded:
					errs <- errors.New("the execution was not recorded")
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		if n := executions.Load(); n != 1 {
			t.Fatalf("round %d: the work ran %d times; want exactly once", round, n)
		}
		if got := 1 + replays.Load() + inProgress.Load(); got != callers {
			t.Fatalf("round %d: %d answers for %d callers", round, got, callers)
		}
		for i, g := range guards {
			out, err := g.Execute(t.Context(), key, fp, func(context.Context) (middleware.Result, error) {
				executions.Add(1)
				return middleware.Result{}, nil
			})
			if err != nil || !out.Replayed || string(out.Value) != want {
				t.Fatalf("round %d: node %d after the race: %+v, %v; want a replay", round, i, out, err)
			}
		}
		if n := executions.Load(); n != 1 {
			t.Fatalf("round %d: the work ran again after the race", round)
		}
		t.Logf("round %d: 1 execution, %d replays, %d in progress", round, replays.Load(), inProgress.Load())
	}
}
