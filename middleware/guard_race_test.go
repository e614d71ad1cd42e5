package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// lostAnswerStore loses the answer to the first Complete after the write
// landed, as a connection cut on the way back or an op timeout that fires
// just after the server wrote would.
type lostAnswerStore struct {
	store.Store
	lost atomic.Bool
}

func (s *lostAnswerStore) Complete(ctx context.Context, r store.Record, ttl time.Duration) (bool, error) {
	ok, err := s.Store.Complete(ctx, r, ttl)
	if err == nil && s.lost.CompareAndSwap(false, true) {
		return false, idemkit.NewError(idemkit.CodeNetworkTimeout, "complete", "injected: the answer was lost", nil)
	}
	return ok, err
}

// TestCompletionAnswerLost: the first completion lands but its answer is
// lost; the retry is refused, because the record now holds an outcome. The
// guard must find that the outcome is its own and report it recorded, not
// lost: nothing was lost, and a retry replays it.
func TestCompletionAnswerLost(t *testing.T) {
	var ev events
	s := &lostAnswerStore{Store: memstore.New()}
	g := newGuard(t, s, middleware.WithHook(&ev), fastBackoff)
	var runs atomic.Int32
	out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v"))
	if err != nil || !out.Recorded {
		t.Fatalf("Execute: %+v, %v; want recorded (the completion landed)", out, err)
	}
	if n := ev.count(middleware.EventNotRecorded) + ev.count(middleware.EventLeaseLost); n != 0 {
		t.Fatalf("events %v; want no not-recorded or lease-lost", ev.kinds())
	}
	if out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "again")); err != nil || !out.Replayed || string(out.Value) != "v" {
		t.Fatalf("retry: %+v, %v; want a replay of v", out, err)
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times", runs.Load())
	}
}

// slowAnswers is a store whose completions land at once but whose answers
// take a while to come back.
type slowAnswers struct {
	store.Store
	delay time.Duration
}

func (s slowAnswers) Complete(ctx context.Context, r store.Record, ttl time.Duration) (bool, error) {
	ok, err := s.Store.Complete(ctx, r, ttl)
	time.Sleep(s.delay)
	return ok, err
}

// TestRenewalRacingCompletion: a renewal falls due while the completion's
// answer is on its way back, after the outcome landed. The renewal must
// not meet the record its own completion wrote and report the lease lost:
// every call is recorded, with no lease-lost event.
func TestRenewalRacingCompletion(t *testing.T) {
	const ttl = 60 * time.Millisecond // renewals every 20 ms
	var ev events
	g := newGuard(t, slowAnswers{memstore.New(), ttl / 2}, middleware.WithHook(&ev), middleware.WithLeaseTTL(ttl))
	for i := range 5 {
		out, err := g.Execute(t.Context(), fmt.Sprint("k", i), fpA, func(context.Context) (middleware.Result, error) {
			time.Sleep(ttl/3 + ttl/12) // the first renewal lands meanwhile; the second falls due during the completion
			return middleware.Result{Value: []byte("v")}, nil
		})
		if err != nil || !out.Recorded {
			t.Fatalf("call %d: %+v, %v", i, out, err)
		}
	}
	if n := ev.count(middleware.EventLeaseLost); n != 0 {
		t.Fatalf("%d lease-lost events for calls whose outcomes were all recorded", n)
	}
}

// stalledExtends is a store whose extensions hang until their ctx ends, as
// on a server that stopped answering (SIGSTOP) while claims still work
// elsewhere.
type stalledExtends struct{ store.Store }

func (s stalledExtends) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	<-ctx.Done()
	return time.Time{}, false, idemkit.NewError(idemkit.CodeNetworkTimeout, "extend", "injected stall", ctx.Err())
}

// TestLeaseLostBeforeAnotherHolderRuns: guard A's extensions stall, so its
// lease runs out; guard B, whose backend answers, then claims the key and
// runs fn. By then A's fn must have been told that its lease is lost (its
// ctx ended): the lease ran out by A's own clock before B could claim, and
// A must not learn it only when its stalled extension gives up, while B's
// fn already runs.
func TestLeaseLostBeforeAnotherHolderRuns(t *testing.T) {
	const ttl = 3 * time.Second // extensions stall for a third of it
	s := memstore.New()
	a := newGuard(t, stalledExtends{s}, middleware.WithLeaseTTL(ttl))
	b := newGuard(t, s, middleware.WithLeaseTTL(time.Minute))
	var runs atomic.Int32
	ctxA := make(chan context.Context, 1)
	resA := make(chan error, 1)
	go func() {
		_, err := a.Execute(context.Background(), "k", fpA, func(ctx context.Context) (middleware.Result, error) {
			runs.Add(1)
			ctxA <- ctx
			<-ctx.Done()
			return middleware.Result{}, context.Cause(ctx)
		})
		resA <- err
	}()
	fnA := <-ctxA
	for {
		_, err := b.Execute(t.Context(), "k", fpA, func(context.Context) (middleware.Result, error) {
			runs.Add(1)
			// Another holder runs: A's fn must know already. (The bound
			// only keeps a timer's delay from failing the test; A's stalled
			// extension would keep it unaware for a third of the lease.)
			select {
			case <-fnA.Done():
			case <-time.After(ttl / 6):
				t.Errorf("B runs fn while A's fn still believes it holds the lease")
			}
			return middleware.Result{Value: []byte("B")}, nil
		}, middleware.WaitBudget(0))
		if err == nil {
			break
		}
		if !errors.Is(err, middleware.ErrInProgress) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := <-resA; !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("A: %v; want its fn's ErrLeaseLost", err)
	}
	if runs.Load() != 2 {
		t.Fatalf("fn ran %d times; want A and B once each", runs.Load())
	}
}

// TestNoGoroutineOutlivesTheCall runs calls that end every way a call can
// end (recorded, fn error, panic, forget, caller gone, lease lost) with
// renewals falling due during each, and checks that no goroutine of the
// guard outlives them.
func TestNoGoroutineOutlivesTheCall(t *testing.T) {
	const ttl = 15 * time.Millisecond
	s := memstore.New()
	g := newGuard(t, s, middleware.WithLeaseTTL(ttl))
	stalled := newGuard(t, stalledExtends{s}, middleware.WithLeaseTTL(ttl))
	before := runtime.NumGoroutine()
	slow := func(r middleware.Result, err error, forget bool) middleware.Func {
		return func(ctx context.Context) (middleware.Result, error) {
			time.Sleep(ttl)
			if forget {
				middleware.DoNotRecord(ctx)
			}
			return r, err
		}
	}
	for i := range 5 {
		key := func(name string) string { return fmt.Sprint(name, i) }
		_, _ = g.Execute(t.Context(), key("ok"), fpA, slow(middleware.Result{Value: []byte("v")}, nil, false))
		_, _ = g.Execute(t.Context(), key("err"), fpA, slow(middleware.Result{}, errors.New("boom"), false))
		_, _ = g.Execute(t.Context(), key("forget"), fpA, slow(middleware.Result{}, nil, true))
		func() {
			defer func() { _ = recover() }()
			_, _ = g.Execute(t.Context(), key("panic"), fpA, func(context.Context) (middleware.Result, error) {
				time.Sleep(ttl)
				panic("boom")
			})
		}()
		ctx, cancel := context.WithTimeout(t.Context(), ttl/2)
		_, _ = g.Execute(ctx, key("gone"), fpA, func(ctx context.Context) (middleware.Result, error) {
			<-ctx.Done()
			return middleware.Result{}, ctx.Err()
		})
		cancel()
		_, _ = stalled.Execute(t.Context(), key("lost"), fpA, func(ctx context.Context) (middleware.Result, error) {
			<-ctx.Done()
			return middleware.Result{Value: []byte("late")}, nil
		})
	}
	// Timers that were stopped start no goroutine; give the runtime a
	// moment to retire the ones that ran.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after the calls, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// TestNamespacesNeverShareARecord: guards with different namespaces on one
// backend never share a record, whatever keys they are given. A namespace
// that contains the separator would make "a" + "b:x" and "a:b" + "x" the
// same record key, so New refuses it.
func TestNamespacesNeverShareARecord(t *testing.T) {
	s := memstore.New()
	if _, err := middleware.New(s, middleware.WithNamespace("a:b")); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("New with a namespace holding ':' = %v; want InvalidArgument", err)
	}
	a := newGuard(t, s, middleware.WithNamespace("a"))
	b := newGuard(t, s, middleware.WithNamespace("ab"))
	var runs atomic.Int32
	if _, err := a.Execute(t.Context(), "b:x", fpA, value(&runs, "tenant a")); err != nil {
		t.Fatal(err)
	}
	out, err := b.Execute(t.Context(), "x", fpA, value(&runs, "tenant ab"))
	if err != nil || out.Replayed || string(out.Value) != "tenant ab" {
		t.Fatalf("the other namespace got %+v, %v; want its own execution", out, err)
	}
}

// countingExtends counts the extensions that land.
type countingExtends struct {
	store.Store
	extends atomic.Int32
}

func (s *countingExtends) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	until, ok, err := s.Store.Extend(ctx, key, fence, ttl)
	if ok && err == nil {
		s.extends.Add(1)
	}
	return until, ok, err
}

// TestConcurrentCallsAllRenewed: calls under way on one guard at once share
// its renewal queue, and every one of them whose fn runs past its lease is
// renewed in time: none loses its lease, every outcome is recorded, and each
// call's lease was extended.
func TestConcurrentCallsAllRenewed(t *testing.T) {
	const ttl = 300 * time.Millisecond // renewals every 100 ms
	const calls = 8
	var ev events
	s := &countingExtends{Store: memstore.New()}
	g := newGuard(t, s, middleware.WithHook(&ev), middleware.WithLeaseTTL(ttl))
	errs := make(chan error, calls)
	for i := range calls {
		go func() {
			out, err := g.Execute(t.Context(), fmt.Sprint("k", i), fpA, func(ctx context.Context) (middleware.Result, error) {
				time.Sleep(ttl * 4 / 3) // past the lease: only renewals keep it
				if err := context.Cause(ctx); err != nil {
					return middleware.Result{}, err
				}
				return middleware.Result{Value: []byte("v")}, nil
			})
			if err == nil && !out.Recorded {
				err = errors.New("not recorded")
			}
			errs <- err
		}()
	}
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := ev.count(middleware.EventLeaseLost); n != 0 {
		t.Fatalf("%d lease-lost events; want none", n)
	}
	if n := s.extends.Load(); n < calls {
		t.Fatalf("%d extensions for %d calls that ran past their lease", n, calls)
	}
}
