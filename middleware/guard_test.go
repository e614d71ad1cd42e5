package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

var (
	fpA = fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/orders", Body: []byte(`{"a":1}`)})
	fpB = fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/orders", Body: []byte(`{"a":2}`)})
)

// events records guard events.
type events struct {
	mu     sync.Mutex
	list   []middleware.Event // all but the starts
	starts int
}

func (e *events) IdempotencyStart(ctx context.Context, ev middleware.Event) context.Context {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.starts++
	return ctx
}

func (e *events) IdempotencyEvent(_ context.Context, ev middleware.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
}

func (e *events) kinds() []middleware.EventKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	var k []middleware.EventKind
	for _, ev := range e.list {
		k = append(k, ev.Kind)
	}
	return k
}

func (e *events) count(kind middleware.EventKind) int {
	n := 0
	for _, k := range e.kinds() {
		if k == kind {
			n++
		}
	}
	return n
}

func newGuard(t *testing.T, s store.Store, opts ...middleware.Option) *middleware.Guard {
	t.Helper()
	g, err := middleware.New(s, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return g
}

// value returns fn work that counts its executions and answers v.
func value(runs *atomic.Int32, v string) middleware.Func {
	return func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{Value: []byte(v)}, nil
	}
}

// TestExactlyOnceAcrossGuards races 64 goroutines through 4 guard instances
// on one key, 100 times: fn runs exactly once per key, every caller gets
// its response, and every guard replays it afterwards.
func TestExactlyOnceAcrossGuards(t *testing.T) {
	s := memstore.New()
	guards := make([]*middleware.Guard, 4)
	for i := range guards {
		guards[i] = newGuard(t, s, middleware.WithWaitBudget(30*time.Second))
	}
	guardtest.ExactlyOnce(t, guards, guardtest.Race{Callers: 64, Rounds: 100, MaxWork: time.Millisecond})
}

func TestReplayAndMismatch(t *testing.T) {
	var ev events
	g := newGuard(t, memstore.New(), middleware.WithHook(&ev))
	var runs atomic.Int32
	out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "first"))
	if err != nil || out.Replayed || !out.Recorded || string(out.Value) != "first" || out.Fence == 0 {
		t.Fatalf("first call: %+v, %v", out, err)
	}
	fence := out.Fence
	out, err = g.Execute(t.Context(), "k", fpA, value(&runs, "second"))
	if err != nil || !out.Replayed || string(out.Value) != "first" || out.Fence != fence || out.CreatedAt.IsZero() {
		t.Fatalf("retry: %+v, %v; want a replay of the first response", out, err)
	}
	_, err = g.Execute(t.Context(), "k", fpB, value(&runs, "third"))
	var me *middleware.MismatchError
	if !errors.Is(err, middleware.ErrMismatch) || !errors.As(err, &me) || me.Stored != fpA.String() || me.Got != fpB.String() {
		t.Fatalf("another request with the key: %v; want a MismatchError", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times", runs.Load())
	}
	want := []middleware.EventKind{middleware.EventExecuted, middleware.EventReplayed, middleware.EventMismatch}
	if got := ev.kinds(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events %v; want %v", got, want)
	}
	for _, e := range ev.list {
		if e.KeyHash == "" || e.KeyHash == "k" || e.Duration < 0 {
			t.Fatalf("event %+v lacks a hashed key or duration", e)
		}
	}
}

func TestAnotherAlgorithmIsNotAMismatch(t *testing.T) {
	g := newGuard(t, memstore.New())
	var runs atomic.Int32
	if _, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v")); err != nil {
		t.Fatal(err)
	}
	other := fingerprint.New("http-v1", [32]byte{1})
	out, err := g.Execute(t.Context(), "k", other, value(&runs, "again"))
	if err != nil || !out.Replayed || runs.Load() != 1 {
		t.Fatalf("a fingerprint of another algorithm: %+v, %v; want a replay", out, err)
	}
}

func TestFnErrorStoresNothing(t *testing.T) {
	g := newGuard(t, memstore.New())
	boom := errors.New("card declined by network")
	var runs atomic.Int32
	_, err := g.Execute(t.Context(), "k", fpA, func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{}, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Execute: %v; want fn's error", err)
	}
	out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "ok"))
	if err != nil || out.Replayed || string(out.Value) != "ok" || runs.Load() != 2 {
		t.Fatalf("retry after an error: %+v, %v, runs %d; want a fresh execution", out, err, runs.Load())
	}
}

func TestPanicReleasesClaim(t *testing.T) {
	g := newGuard(t, memstore.New(), middleware.WithWaitBudget(0))
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v; want the panic to go on", r)
			}
		}()
		_, _ = g.Execute(t.Context(), "k", fpA, func(context.Context) (middleware.Result, error) { panic("boom") })
	}()
	var runs atomic.Int32
	out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "after panic"))
	if err != nil || out.Replayed || runs.Load() != 1 {
		t.Fatalf("retry after a panic: %+v, %v; want it to execute (the claim released, nothing stored)", out, err)
	}
}

func TestDoNotRecordLetsARetryRunAgain(t *testing.T) {
	g := newGuard(t, memstore.New())
	var runs atomic.Int32
	fn := func(ctx context.Context) (middleware.Result, error) {
		runs.Add(1)
		middleware.DoNotRecord(ctx)
		return middleware.Result{Value: []byte("503")}, nil
	}
	for range 2 {
		out, err := g.Execute(t.Context(), "k", fpA, fn)
		if err != nil || out.Replayed || out.Recorded || string(out.Value) != "503" {
			t.Fatalf("DoNotRecord: %+v, %v", out, err)
		}
	}
	if runs.Load() != 2 {
		t.Fatalf("fn ran %d times; a forgotten outcome must let a retry run again", runs.Load())
	}
}

func TestNotReplayableNeverRunsAgain(t *testing.T) {
	g := newGuard(t, memstore.New())
	var runs atomic.Int32
	out, err := g.Execute(t.Context(), "k", fpA, func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{Value: []byte("streamed"), NotReplayable: true}, nil
	})
	if err != nil || !out.Recorded || string(out.Value) != "streamed" {
		t.Fatalf("first: %+v, %v", out, err)
	}
	_, err = g.Execute(t.Context(), "k", fpA, value(&runs, "again"))
	var ne *middleware.NotReplayableError
	if !errors.Is(err, middleware.ErrNotReplayable) || !errors.As(err, &ne) || ne.Fence != out.Fence {
		t.Fatalf("retry: %v; want ErrNotReplayable", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times", runs.Load())
	}
}

func TestTooLargeResponseRecordedNotReplayable(t *testing.T) {
	g := newGuard(t, memstore.New(memstore.WithMaxResponseBytes(10)))
	var runs atomic.Int32
	out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "a response larger than ten bytes"))
	if err != nil || !out.Recorded {
		t.Fatalf("first: %+v, %v", out, err)
	}
	if _, err := g.Execute(t.Context(), "k", fpA, value(&runs, "x")); !errors.Is(err, middleware.ErrNotReplayable) {
		t.Fatalf("retry: %v; want ErrNotReplayable", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times", runs.Load())
	}
}

func TestCancelledAfterFnStillRecords(t *testing.T) {
	g := newGuard(t, memstore.New())
	ctx, cancel := context.WithCancel(t.Context())
	var runs atomic.Int32
	out, err := g.Execute(ctx, "k", fpA, func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		cancel() // the client goes away as the work finishes
		return middleware.Result{Value: []byte("done")}, nil
	})
	if err != nil || !out.Recorded {
		t.Fatalf("Execute: %+v, %v; want the outcome recorded despite the cancelled ctx", out, err)
	}
	out, err = g.Execute(t.Context(), "k", fpA, value(&runs, "again"))
	if err != nil || !out.Replayed || string(out.Value) != "done" || runs.Load() != 1 {
		t.Fatalf("retry: %+v, %v; want a replay", out, err)
	}
}

func TestInProgress(t *testing.T) {
	var ev events
	g := newGuard(t, memstore.New(), middleware.WithHook(&ev))
	entered, finish := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = g.Execute(context.Background(), "k", fpA, func(context.Context) (middleware.Result, error) {
			close(entered)
			<-finish
			return middleware.Result{Value: []byte("first")}, nil
		})
	}()
	<-entered
	var runs atomic.Int32
	_, err := g.Execute(t.Context(), "k", fpA, value(&runs, "dup"), middleware.WaitBudget(0))
	var ie *middleware.InProgressError
	if !errors.Is(err, middleware.ErrInProgress) || !errors.As(err, &ie) || ie.Attempts != 1 {
		t.Fatalf("an immediate duplicate: %v; want in progress after 1 attempt", err)
	}
	_, err = g.Execute(t.Context(), "k", fpA, value(&runs, "dup"), middleware.WaitBudget(30*time.Millisecond))
	if !errors.As(err, &ie) || ie.Waited < 30*time.Millisecond || ie.Attempts < 2 {
		t.Fatalf("a waiting duplicate: %v; want in progress after waiting out its budget", err)
	}
	// Another payload under the running key is refused at once.
	if _, err := g.Execute(t.Context(), "k", fpB, value(&runs, "other"), middleware.WaitBudget(time.Minute)); !errors.Is(err, middleware.ErrMismatch) {
		t.Fatalf("another payload while the first runs: %v; want a mismatch at once", err)
	}
	// A duplicate that waits long enough gets the first response.
	result := make(chan middleware.Outcome, 1)
	go func() {
		out, err := g.Execute(context.Background(), "k", fpA, value(&runs, "dup"), middleware.WaitBudget(time.Minute))
		if err != nil {
			t.Errorf("a patient duplicate: %v", err)
		}
		result <- out
	}()
	close(finish)
	<-done
	if out := <-result; !out.Replayed || string(out.Value) != "first" {
		t.Fatalf("the patient duplicate got %+v; want a replay", out)
	}
	if runs.Load() != 0 {
		t.Fatalf("a duplicate ran fn %d times", runs.Load())
	}
	if ev.count(middleware.EventInProgress) != 2 || ev.count(middleware.EventMismatch) != 1 {
		t.Fatalf("events %v; want two in-progress and one mismatch", ev.kinds())
	}
}

// TestDefaultWaitBudgetCoversALongRequest: with the default budget (2 s), a
// duplicate of a request that takes 1.5 s waits for it and replays its
// response; the wait is bounded by the budget, not by a number of retries.
func TestDefaultWaitBudgetCoversALongRequest(t *testing.T) {
	g := newGuard(t, memstore.New())
	var runs atomic.Int32
	started := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := g.Execute(context.Background(), "k", fpA, func(context.Context) (middleware.Result, error) {
			runs.Add(1)
			close(started)
			time.Sleep(1500 * time.Millisecond)
			return middleware.Result{Value: []byte("slow")}, nil
		})
		first <- err
	}()
	<-started
	out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "dup"))
	if err != nil || !out.Replayed || string(out.Value) != "slow" {
		t.Fatalf("the duplicate: %+v, %v; want a replay after waiting", out, err)
	}
	if err := <-first; err != nil || runs.Load() != 1 {
		t.Fatalf("first: %v, runs %d", err, runs.Load())
	}
}

// faultyStore injects failures into a real store.
type faultyStore struct {
	store.Store
	failCompletes                        atomic.Int32
	claims, completes, extends, releases atomic.Int32
	claimErr                             error
	extendErr                            error
}

func (f *faultyStore) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	f.claims.Add(1)
	if f.claimErr != nil {
		return store.Record{}, false, f.claimErr
	}
	return f.Store.Claim(ctx, key, fp, ttl)
}

func (f *faultyStore) Complete(ctx context.Context, r store.Record, ttl time.Duration) (bool, error) {
	f.completes.Add(1)
	if f.failCompletes.Add(-1) >= 0 {
		return false, idemkit.NewError(idemkit.CodeServiceUnavailable, "complete", "injected failure", nil)
	}
	return f.Store.Complete(ctx, r, ttl)
}

func (f *faultyStore) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	f.extends.Add(1)
	if f.extendErr != nil {
		return time.Time{}, false, f.extendErr
	}
	return f.Store.Extend(ctx, key, fence, ttl)
}

func (f *faultyStore) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	f.releases.Add(1)
	return f.Store.Release(ctx, key, fence)
}

var fastBackoff = middleware.WithBackoff(idemkit.Backoff{Base: time.Millisecond, Max: time.Millisecond})

func TestCompletionRetriedUntilItLands(t *testing.T) {
	var ev events
	fs := &faultyStore{Store: memstore.New()}
	fs.failCompletes.Store(3)
	g := newGuard(t, fs, middleware.WithHook(&ev), fastBackoff)
	var runs atomic.Int32
	out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v"))
	if err != nil || !out.Recorded {
		t.Fatalf("Execute: %+v, %v; want recorded after retries", out, err)
	}
	if fs.completes.Load() != 4 || ev.count(middleware.EventBackendError) != 3 {
		t.Fatalf("%d completes, events %v; want 4 completes and 3 backend errors", fs.completes.Load(), ev.kinds())
	}
	if out, _ := g.Execute(t.Context(), "k", fpA, value(&runs, "again")); !out.Replayed {
		t.Fatal("no replay after the record landed")
	}
}

func TestCompletionGivesUpAndKeepsTheClaim(t *testing.T) {
	var ev events
	fs := &faultyStore{Store: memstore.New()}
	fs.failCompletes.Store(1 << 30)
	g := newGuard(t, fs, middleware.WithHook(&ev), fastBackoff,
		middleware.WithRecordWriteTimeout(20*time.Millisecond), middleware.WithLeaseTTL(time.Minute), middleware.WithWaitBudget(0))
	var runs atomic.Int32
	out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v"))
	if err != nil || out.Recorded || string(out.Value) != "v" {
		t.Fatalf("Execute: %+v, %v; want the response, not recorded", out, err)
	}
	if ev.count(middleware.EventNotRecorded) != 1 || fs.releases.Load() != 0 {
		t.Fatalf("events %v, %d releases; want not-recorded and no release", ev.kinds(), fs.releases.Load())
	}
	// The claim was left to run out: a retry is told "in progress" and fn
	// does not run again.
	fs.failCompletes.Store(0)
	if _, err := g.Execute(t.Context(), "k", fpA, value(&runs, "again")); !errors.Is(err, middleware.ErrInProgress) {
		t.Fatalf("retry: %v; want in progress while the abandoned claim runs", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times", runs.Load())
	}
}

// TestLeaseRunsOutUnreachableButCompletes: the backend cannot be reached
// for extensions, so fn's ctx ends when the lease runs out by the guard's
// clock; nobody claimed the key meanwhile, so the completion still lands
// and a retry replays (a slow backend is never a second execution).
func TestLeaseRunsOutUnreachableButCompletes(t *testing.T) {
	var ev events
	fs := &faultyStore{Store: memstore.New(), extendErr: idemkit.NewError(idemkit.CodeServiceUnavailable, "extend", "injected failure", nil)}
	g := newGuard(t, fs, middleware.WithHook(&ev), middleware.WithLeaseTTL(30*time.Millisecond))
	var runs atomic.Int32
	out, err := g.Execute(t.Context(), "k", fpA, func(ctx context.Context) (middleware.Result, error) {
		runs.Add(1)
		<-ctx.Done() // the lease ran out: fn's ctx ends
		if !errors.Is(context.Cause(ctx), idemkit.ErrLeaseLost) {
			t.Errorf("fn's ctx cause %v; want ErrLeaseLost", context.Cause(ctx))
		}
		return middleware.Result{Value: []byte("late")}, nil
	})
	if err != nil || !out.Recorded {
		t.Fatalf("Execute: %+v, %v; want recorded (nobody claimed the key since)", out, err)
	}
	if ev.count(middleware.EventLeaseLost) != 1 {
		t.Fatalf("events %v; want one lease-lost", ev.kinds())
	}
	if out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "retry")); err != nil || !out.Replayed || runs.Load() != 1 {
		t.Fatalf("retry: %+v, %v, runs %d; want a replay", out, err, runs.Load())
	}
}

// TestStaleHolderNeverWrites: the first holder's lease runs out while it
// cannot reach the backend; a second guard claims the key and records its
// outcome; the first holder's completion is refused, and replays never
// change.
func TestStaleHolderNeverWrites(t *testing.T) {
	var ev events
	s := memstore.New()
	stalled := &faultyStore{Store: s, extendErr: idemkit.NewError(idemkit.CodeNetworkTimeout, "extend", "injected stall", nil)}
	a := newGuard(t, stalled, middleware.WithHook(&ev), middleware.WithLeaseTTL(30*time.Millisecond))
	b := newGuard(t, s, middleware.WithLeaseTTL(time.Minute))
	var runs atomic.Int32
	entered, taken := make(chan struct{}), make(chan struct{})
	resA := make(chan middleware.Outcome, 1)
	go func() {
		out, err := a.Execute(context.Background(), "k", fpA, func(ctx context.Context) (middleware.Result, error) {
			runs.Add(1)
			close(entered)
			<-taken // B took the key over and recorded its outcome
			return middleware.Result{Value: []byte("A")}, nil
		})
		if err != nil {
			t.Errorf("A: %v", err)
		}
		resA <- out
	}()
	<-entered
	var outB middleware.Outcome
	for {
		var err error
		outB, err = b.Execute(t.Context(), "k", fpA, value(&runs, "B"), middleware.WaitBudget(0))
		if err == nil {
			break
		}
		if !errors.Is(err, middleware.ErrInProgress) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(taken)
	outA := <-resA
	if outB.Replayed || !outB.Recorded || outB.Fence <= outA.Fence || outA.Recorded {
		t.Fatalf("A %+v, B %+v; want B executed with a greater fence and A not recorded", outA, outB)
	}
	if ev.count(middleware.EventNotRecorded) != 1 {
		t.Fatalf("events of A %v; want not-recorded", ev.kinds())
	}
	for _, g := range []*middleware.Guard{a, b} {
		if out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "x")); err != nil || string(out.Value) != "B" {
			t.Fatalf("replay: %+v, %v; want B's response", out, err)
		}
	}
	if runs.Load() != 2 {
		t.Fatalf("fn ran %d times; want A and B once each", runs.Load())
	}
}

func TestBackendUnavailable(t *testing.T) {
	var ev events
	fs := &faultyStore{Store: memstore.New(), claimErr: idemkit.NewError(idemkit.CodeServiceUnavailable, "claim", "down", nil)}
	g := newGuard(t, fs, middleware.WithHook(&ev))
	var runs atomic.Int32
	_, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v"))
	var ue *middleware.UnavailableError
	if !errors.Is(err, middleware.ErrUnavailable) || !errors.As(err, &ue) || !errors.Is(err, idemkit.ErrServiceUnavailable) {
		t.Fatalf("Execute: %v; want ErrUnavailable wrapping the backend's error", err)
	}
	if runs.Load() != 0 || ev.count(middleware.EventUnavailable) != 1 || ev.starts != 1 {
		t.Fatalf("fn ran %d times, events %v", runs.Load(), ev.kinds())
	}
	s := memstore.New()
	_ = s.Close()
	g2 := newGuard(t, s)
	if _, err := g2.Execute(t.Context(), "k", fpA, value(&runs, "v")); !errors.Is(err, middleware.ErrUnavailable) || runs.Load() != 0 {
		t.Fatalf("with the store closed: %v, runs %d", err, runs.Load())
	}
}

// TestRoundTrips: a first execution costs one claim and one completion; a
// replay one claim; with a hook or without.
func TestRoundTrips(t *testing.T) {
	for _, hooked := range []bool{false, true} {
		fs := &faultyStore{Store: memstore.New()}
		var opts []middleware.Option
		if hooked {
			opts = append(opts, middleware.WithHook(&events{}))
		}
		g := newGuard(t, fs, opts...)
		var runs atomic.Int32
		if _, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v")); err != nil {
			t.Fatal(err)
		}
		if fs.claims.Load() != 1 || fs.completes.Load() != 1 || fs.releases.Load() != 0 {
			t.Fatalf("hook %v: first execution: %d claims, %d completes, %d releases; want 1, 1, 0",
				hooked, fs.claims.Load(), fs.completes.Load(), fs.releases.Load())
		}
		if _, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v")); err != nil {
			t.Fatal(err)
		}
		if fs.claims.Load() != 2 || fs.completes.Load() != 1 {
			t.Fatalf("hook %v: a replay cost %d claims and %d completes; want 1 and 0", hooked, fs.claims.Load()-1, fs.completes.Load()-1)
		}
	}
}

func TestKeysAreIsolatedAndHashed(t *testing.T) {
	g := newGuard(t, memstore.New())
	var runs atomic.Int32
	keys := []string{"a", "A", "a ", "caf\u00e9", "cafe\u0301", "x/y", string(make([]byte, 900)), "\x00", "a:b", "idempotency:a"}
	for i, k := range keys {
		out, err := g.Execute(t.Context(), k, fpA, value(&runs, fmt.Sprint(i)))
		if err != nil || out.Replayed {
			t.Fatalf("key %q: %+v, %v; want a fresh execution", k, out, err)
		}
	}
	for i, k := range keys {
		out, err := g.Execute(t.Context(), k, fpA, value(&runs, "x"))
		if err != nil || !out.Replayed || string(out.Value) != fmt.Sprint(i) {
			t.Fatalf("key %q: %+v, %v; want its own replay", k, out, err)
		}
	}
	for _, k := range []string{"", string(make([]byte, 2000))} {
		if _, err := g.Execute(t.Context(), k, fpA, value(&runs, "x")); !errors.Is(err, middleware.ErrInvalidKey) {
			t.Fatalf("key of %d bytes: %v; want ErrInvalidKey", len(k), err)
		}
	}
}

func TestOptionValidation(t *testing.T) {
	s := memstore.New()
	if _, err := middleware.New(nil); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("nil store: %v", err)
	}
	for i, o := range []middleware.Option{
		middleware.WithRecordTTL(0), middleware.WithLeaseTTL(time.Millisecond),
		middleware.WithBackoff(idemkit.Backoff{}), middleware.WithBackoff(idemkit.Backoff{Base: 2, Max: 1}), middleware.WithWaitBudget(-1),
		middleware.WithRecordWriteTimeout(0), middleware.WithOpTimeout(0), middleware.WithNamespace(""), middleware.WithValueFingerprint(nil),
	} {
		if _, err := middleware.New(s, o); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("option %d: %v; want InvalidArgument", i, err)
		}
	}
}

func TestNewRefusesNilOptionNamingTheFix(t *testing.T) {
	g, err := middleware.New(memstore.New(), middleware.WithRecordTTL(time.Hour), nil)
	if g != nil || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !strings.Contains(err.Error(), "an option is nil; remove it") {
		t.Fatalf("a nil option: %v, %v; want InvalidArgument naming it", g, err)
	}
}

func TestZeroGuardFailsItsCallsWithoutPanicking(t *testing.T) {
	var g middleware.Guard
	var runs atomic.Int32
	_, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v"))
	if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !strings.Contains(err.Error(), "middleware.New") || runs.Load() != 0 {
		t.Fatalf("Execute on a zero Guard: %v, %d runs; want InvalidArgument naming middleware.New, no run", err, runs.Load())
	}
	if _, err := g.Forget(t.Context(), "", "k"); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("Forget on a zero Guard: %v; want InvalidArgument", err)
	}
	if _, _, err := g.Inspect(t.Context(), "", "k", false); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("Inspect on a zero Guard: %v; want InvalidArgument", err)
	}
}

func TestHookPanicIsContained(t *testing.T) {
	g := newGuard(t, memstore.New(), middleware.WithHook(middleware.HookFunc(func(context.Context, middleware.Event) { panic("hook") })))
	var runs atomic.Int32
	if out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v")); err != nil || !out.Recorded {
		t.Fatalf("Execute with a panicking hook: %+v, %v", out, err)
	}
}
