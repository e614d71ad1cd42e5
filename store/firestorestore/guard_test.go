package firestorestore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// newGuard returns a guard on a store of its own on c.
func newGuard(t testing.TB, c *firestore.Client, opts ...middleware.Option) *middleware.Guard {
	t.Helper()
	g, err := middleware.New(newStore(t, c, firestorestore.WithLogger(discard())), append([]middleware.Option{middleware.WithLogger(discard())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// answer is work that answers body and counts its runs.
func answer(runs *atomic.Int32, body string) middleware.Func {
	return func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{Value: []byte(body)}, nil
	}
}

// TestExactlyOnceAcrossNodes races 16 goroutines over 3 guards on the
// emulator, each guard with a Firestore client of its own (its own
// connection, as a separate process would have) and its own Store, on one
// key, 5 times with fresh keys (guardtest.ExactlyOnce): every time the
// work runs exactly once, and every other caller gets its response
// replayed (or, past the wait budget, is told the request is in progress).
func TestExactlyOnceAcrossNodes(t *testing.T) {
	t.Parallel()
	project := testenv.FirestoreProject(t)
	guards := make([]*middleware.Guard, 3)
	for i := range guards {
		guards[i] = newGuard(t, client(t, project), middleware.WithWaitBudget(30*time.Second), middleware.WithOpTimeout(20*time.Second))
	}
	st := guardtest.ExactlyOnce(t, guards, guardtest.Race{Callers: 16, Rounds: 5, KeyPrefix: "order-", InProgressOK: true, MaxWork: 50 * time.Millisecond})
	t.Logf("%+v", st)
}

// TestNodeClocksCannotTakeOverALiveClaim runs a second node against a
// live claim with a 3 s lease that the first node keeps extending, for
// longer than 8 s: neither the store nor the guard reads a wall clock
// (leases are judged by Firestore's commit and read times; the guard
// measures only elapsed time), so however far a node's clock is ahead —
// the old design took over a live lease from a node 6.7 s ahead — the
// claim stays live for it, it is told "in progress", and once the work is
// done it replays it; the work runs once.
func TestNodeClocksCannotTakeOverALiveClaim(t *testing.T) {
	t.Parallel()
	project := testenv.FirestoreProject(t)
	const lease = 3 * time.Second
	a := newGuard(t, client(t, project), middleware.WithLeaseTTL(lease))
	b := newGuard(t, client(t, project), middleware.WithLeaseTTL(lease), middleware.WithWaitBudget(0))
	fp := fingerprint.New("test", [32]byte{1})
	var runs atomic.Int32
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := a.Execute(t.Context(), "order-1", fp, func(context.Context) (middleware.Result, error) {
			runs.Add(1)
			close(started)
			<-finish
			return middleware.Result{Value: []byte("once")}, nil
		})
		done <- err
	}()
	<-started
	// The claim is live by Firestore's clock for the whole lease (and is
	// extended); by the skewed node's clock it ran out long ago.
	for start := time.Now(); time.Since(start) < 9*time.Second; time.Sleep(lease / 2) {
		if _, err := b.Execute(t.Context(), "order-1", fp, answer(&runs, "twice")); !errors.Is(err, middleware.ErrInProgress) {
			t.Fatalf("the second node: %v; want ErrInProgress", err)
		}
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out, err := b.Execute(t.Context(), "order-1", fp, answer(&runs, "twice"))
	if err != nil || !out.Replayed || string(out.Value) != "once" {
		t.Fatalf("the second node after completion: %+v, %v; want the replay", out, err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the work ran %d times", n)
	}
}

// TestGuardRoundTrips counts the RPCs a guard sends to Firestore, with an
// event hook and without: a replay is one read (BatchGetDocuments); a
// first execution is the claim's read and write-only commit (a Create)
// and the completion's commit, conditioned on the claim's update time.
func TestGuardRoundTrips(t *testing.T) {
	t.Parallel()
	for _, hook := range []bool{false, true} {
		name := "without hook"
		if hook {
			name = "with hook"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, rc := countingClient(t, testenv.FirestoreProject(t))
			var events atomic.Int32
			var opts []middleware.Option
			if hook {
				opts = append(opts, middleware.WithHook(middleware.HookFunc(func(context.Context, middleware.Event) { events.Add(1) })))
			}
			g := newGuard(t, c, opts...)
			fp := fingerprint.New("test", [32]byte{2})
			var runs atomic.Int32
			rc.take()
			out, err := g.Execute(t.Context(), "order-1", fp, answer(&runs, "ok"))
			if err != nil || out.Replayed || !out.Recorded {
				t.Fatalf("first execution: %+v, %v", out, err)
			}
			first, firstBy := rc.take()
			out, err = g.Execute(t.Context(), "order-1", fp, answer(&runs, "again"))
			if err != nil || !out.Replayed || string(out.Value) != "ok" {
				t.Fatalf("retry: %+v, %v; want the replay", out, err)
			}
			replay, replayBy := rc.take()
			t.Logf("first execution: %d RPCs (%s); replay: %d (%s)", first, firstBy, replay, replayBy)
			if want := "BatchGetDocuments=1 Commit=2"; first != 3 || firstBy != want {
				t.Errorf("first execution: %d RPCs (%s); want 3 (%s)", first, firstBy, want)
			}
			if want := "BatchGetDocuments=1"; replay != 1 || replayBy != want {
				t.Errorf("replay: %d RPCs (%s); want 1 (%s)", replay, replayBy, want)
			}
			if hook && events.Load() != 2 {
				t.Errorf("the hook saw %d events; want 2", events.Load())
			}
			if runs.Load() != 1 {
				t.Errorf("the work ran %d times", runs.Load())
			}
		})
	}
}

// TestGuardStalledEmulator freezes an emulator of the test's own: the
// guard answers ErrUnavailable (a coded backend error) within its op
// timeout, without running the work, and works again once the emulator
// is back.
func TestGuardStalledEmulator(t *testing.T) {
	t.Parallel()
	e := testenv.NewFirestore(t)
	const opTimeout = time.Second
	c := dial(t, e.Host, testenv.FirestoreProject(t))
	g := newGuard(t, c, middleware.WithOpTimeout(opTimeout))
	fp := fingerprint.New("test", [32]byte{3})
	var runs atomic.Int32
	// A fresh emulator's first answers can take longer than the op timeout.
	warm := newGuard(t, c, middleware.WithOpTimeout(30*time.Second))
	if _, err := warm.Execute(t.Context(), "warm", fp, answer(&runs, "ok")); err != nil {
		t.Fatal(err)
	}
	resume := e.Stall(t)
	start := time.Now()
	_, err := g.Execute(t.Context(), "order-1", fp, answer(&runs, "ok"))
	took := time.Since(start)
	resume()
	var ue *middleware.UnavailableError
	if !errors.Is(err, middleware.ErrUnavailable) || !errors.As(err, &ue) {
		t.Fatalf("Execute on a stalled emulator: %v; want ErrUnavailable", err)
	}
	if c := idemkit.CodeOf(err); c != idemkit.CodeNetworkTimeout && c != idemkit.CodeServiceUnavailable {
		t.Fatalf("Execute on a stalled emulator: code %v (%v); want NetworkTimeout or ServiceUnavailable", c, err)
	}
	if took > opTimeout+2*time.Second {
		t.Fatalf("Execute on a stalled emulator took %v with a %v op timeout", took, opTimeout)
	}
	if runs.Load() != 1 {
		t.Fatalf("the work ran %d times; want once (the warm-up)", runs.Load())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		_, err := g.Execute(ctx, "order-1", fp, answer(&runs, "ok"))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the guard did not work again after the emulator resumed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
