package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/memlock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/middleware/guardtest"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

var (
	fpA = fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/orders", Body: []byte(`{"a":1}`)})
	fpB = fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/orders", Body: []byte(`{"a":2}`)})
)

// events records guard events.
type events struct {
	mu   sync.Mutex
	list []middleware.Event
}

func (e *events) IdempotencyEvent(ev middleware.Event) {
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

func newGuard(t *testing.T, s store.Store, l lock.Locker, opts ...middleware.Option) *middleware.Guard {
	t.Helper()
	g, err := middleware.New(s, l, opts...)
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
	s, l := memstore.New(), memlock.New()
	guards := make([]*middleware.Guard, 4)
	for i := range guards {
		guards[i] = newGuard(t, s, l, middleware.WithWaitBudget(30*time.Second))
	}
	guardtest.ExactlyOnce(t, guards, guardtest.Race{Callers: 64, Rounds: 100, MaxWork: time.Millisecond})
}

func TestReplayAndMismatch(t *testing.T) {
	var ev events
	g := newGuard(t, memstore.New(), memlock.New(), middleware.WithHook(&ev))
	var runs atomic.Int32
	out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "first"))
	if err != nil || out.Replayed || !out.Recorded || string(out.Value) != "first" || out.Fence != 1 {
		t.Fatalf("first call: %+v, %v", out, err)
	}
	out, err = g.Execute(t.Context(), "k", fpA, value(&runs, "second"))
	if err != nil || !out.Replayed || string(out.Value) != "first" || out.Fence != 1 || out.CreatedAt.IsZero() {
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
	g := newGuard(t, memstore.New(), memlock.New())
	var runs atomic.Int32
	if _, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v")); err != nil {
		t.Fatal(err)
	}
	other := fingerprint.New("http-v2", [32]byte{1})
	out, err := g.Execute(t.Context(), "k", other, value(&runs, "again"))
	if err != nil || !out.Replayed || runs.Load() != 1 {
		t.Fatalf("a fingerprint of another algorithm: %+v, %v; want a replay", out, err)
	}
}

func TestFnErrorStoresNothing(t *testing.T) {
	g := newGuard(t, memstore.New(), memlock.New())
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

func TestPanicReleasesLock(t *testing.T) {
	l := memlock.New()
	g := newGuard(t, memstore.New(), l, middleware.WithWaitBudget(0))
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
		t.Fatalf("retry after a panic: %+v, %v; want it to execute (the lock released, nothing stored)", out, err)
	}
}

func TestForgetVerdict(t *testing.T) {
	g := newGuard(t, memstore.New(), memlock.New())
	var runs atomic.Int32
	fn := func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{Value: []byte("503"), Verdict: middleware.Forget}, nil
	}
	for range 2 {
		out, err := g.Execute(t.Context(), "k", fpA, fn)
		if err != nil || out.Replayed || out.Recorded || string(out.Value) != "503" {
			t.Fatalf("Forget: %+v, %v", out, err)
		}
	}
	if runs.Load() != 2 {
		t.Fatalf("fn ran %d times; a forgotten outcome must let a retry run again", runs.Load())
	}
}

func TestNotReplayableNeverRunsAgain(t *testing.T) {
	g := newGuard(t, memstore.New(), memlock.New())
	var runs atomic.Int32
	out, err := g.Execute(t.Context(), "k", fpA, func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{Value: []byte("streamed"), Verdict: middleware.RecordNotReplayable}, nil
	})
	if err != nil || !out.Recorded || string(out.Value) != "streamed" {
		t.Fatalf("first: %+v, %v", out, err)
	}
	_, err = g.Execute(t.Context(), "k", fpA, value(&runs, "again"))
	var ne *middleware.NotReplayableError
	if !errors.Is(err, middleware.ErrNotReplayable) || !errors.As(err, &ne) || ne.Fence != 1 {
		t.Fatalf("retry: %v; want ErrNotReplayable", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times", runs.Load())
	}
}

func TestTooLargeResponseRecordedNotReplayable(t *testing.T) {
	g := newGuard(t, memstore.New(memstore.WithMaxResponseBytes(10)), memlock.New())
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
	g := newGuard(t, memstore.New(), memlock.New())
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
	g := newGuard(t, memstore.New(), memlock.New(), middleware.WithHook(&ev))
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
	var le *middleware.LockAcquisitionError
	if !errors.Is(err, middleware.ErrInProgress) || !errors.As(err, &le) || le.Attempts != 1 {
		t.Fatalf("an immediate duplicate: %v; want in progress after 1 attempt", err)
	}
	_, err = g.Execute(t.Context(), "k", fpA, value(&runs, "dup"), middleware.WaitBudget(30*time.Millisecond))
	if !errors.As(err, &le) || le.Waited < 30*time.Millisecond {
		t.Fatalf("a waiting duplicate: %v; want in progress after waiting out its budget", err)
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
	if ev.count(middleware.EventInProgress) != 2 {
		t.Fatalf("events %v; want two in-progress", ev.kinds())
	}
}

// flakyStore fails the first n Puts with ServiceUnavailable: a store
// hiccup injected into a real store.
type flakyStore struct {
	store.Store
	failPuts atomic.Int32
	puts     atomic.Int32
	gets     atomic.Int32
	getErr   error
}

func (f *flakyStore) Get(ctx context.Context, key string) (store.Record, bool, error) {
	f.gets.Add(1)
	if f.getErr != nil {
		return store.Record{}, false, f.getErr
	}
	return f.Store.Get(ctx, key)
}

func (f *flakyStore) Put(ctx context.Context, r store.Record, ttl time.Duration) (bool, error) {
	f.puts.Add(1)
	if f.failPuts.Add(-1) >= 0 {
		return false, idemkit.NewError(idemkit.CodeServiceUnavailable, "put", "injected failure", nil)
	}
	return f.Store.Put(ctx, r, ttl)
}

func TestRecordWriteRetriedUntilItLands(t *testing.T) {
	var ev events
	fs := &flakyStore{Store: memstore.New()}
	fs.failPuts.Store(3)
	g := newGuard(t, fs, memlock.New(), middleware.WithHook(&ev), middleware.WithBaseDelay(time.Millisecond))
	var runs atomic.Int32
	out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v"))
	if err != nil || !out.Recorded {
		t.Fatalf("Execute: %+v, %v; want recorded after retries", out, err)
	}
	if fs.puts.Load() != 4 || ev.count(middleware.EventBackendError) != 3 {
		t.Fatalf("%d puts, events %v; want 4 puts and 3 backend errors", fs.puts.Load(), ev.kinds())
	}
	if out, _ := g.Execute(t.Context(), "k", fpA, value(&runs, "again")); !out.Replayed {
		t.Fatal("no replay after the record landed")
	}
}

func TestRecordWriteGivesUpAndKeepsLock(t *testing.T) {
	var ev events
	fs := &flakyStore{Store: memstore.New()}
	fs.failPuts.Store(1 << 30)
	l := memlock.New()
	g := newGuard(t, fs, l, middleware.WithHook(&ev), middleware.WithBaseDelay(time.Millisecond),
		middleware.WithRecordWriteTimeout(20*time.Millisecond), middleware.WithLockTTL(time.Minute), middleware.WithWaitBudget(0))
	var runs atomic.Int32
	out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v"))
	if err != nil || out.Recorded || string(out.Value) != "v" {
		t.Fatalf("Execute: %+v, %v; want the response, not recorded", out, err)
	}
	if ev.count(middleware.EventNotRecorded) != 1 {
		t.Fatalf("events %v; want not-recorded", ev.kinds())
	}
	// The lock was left to run out: a retry is told "in progress" and fn
	// does not run again.
	fs.failPuts.Store(0)
	if _, err := g.Execute(t.Context(), "k", fpA, value(&runs, "again")); !errors.Is(err, middleware.ErrInProgress) {
		t.Fatalf("retry: %v; want in progress while the abandoned lease runs", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times", runs.Load())
	}
}

// stuckExtend makes every Extend of a real locker fail, as a lock backend
// that cannot be reached for renewals would.
type stuckExtend struct{ lock.Locker }

func (stuckExtend) Extend(context.Context, string, time.Duration) (lock.Outcome, error) {
	return lock.Outcome{}, idemkit.NewError(idemkit.CodeServiceUnavailable, "extend", "injected failure", nil)
}

func TestLeaseLostNotRecorded(t *testing.T) {
	var ev events
	s := memstore.New()
	g := newGuard(t, s, stuckExtend{memlock.New()}, middleware.WithHook(&ev), middleware.WithLockTTL(30*time.Millisecond))
	var runs atomic.Int32
	out, err := g.Execute(t.Context(), "k", fpA, func(ctx context.Context) (middleware.Result, error) {
		runs.Add(1)
		<-ctx.Done() // the lease is lost: fn's ctx ends
		if !errors.Is(context.Cause(ctx), lock.ErrLeaseLost) {
			t.Errorf("fn's ctx cause %v; want ErrLeaseLost", context.Cause(ctx))
		}
		return middleware.Result{Value: []byte("late")}, nil
	})
	if err != nil || out.Recorded {
		t.Fatalf("Execute: %+v, %v; want not recorded", out, err)
	}
	if ev.count(middleware.EventLeaseLost) != 1 || ev.count(middleware.EventNotRecorded) != 1 {
		t.Fatalf("events %v; want lease-lost and not-recorded", ev.kinds())
	}
	// Nothing was recorded: once the lease has run out, a retry executes.
	g2 := newGuard(t, s, memlock.New())
	if out, err := g2.Execute(t.Context(), "k", fpA, value(&runs, "retry")); err != nil || out.Replayed {
		t.Fatalf("retry: %+v, %v; want a fresh execution (no record was written)", out, err)
	}
}

func TestBackendUnavailable(t *testing.T) {
	var ev events
	fs := &flakyStore{Store: memstore.New(), getErr: idemkit.NewError(idemkit.CodeServiceUnavailable, "get", "down", nil)}
	g := newGuard(t, fs, memlock.New(), middleware.WithHook(&ev))
	var runs atomic.Int32
	_, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v"))
	var ue *middleware.UnavailableError
	if !errors.Is(err, middleware.ErrUnavailable) || !errors.As(err, &ue) || !errors.Is(err, idemkit.ErrServiceUnavailable) {
		t.Fatalf("Execute: %v; want ErrUnavailable wrapping the backend's error", err)
	}
	if runs.Load() != 0 {
		t.Fatal("fn ran although the guard could not tell whether it already had")
	}
	l := memlock.New()
	_ = l.Close()
	g2 := newGuard(t, memstore.New(), l)
	if _, err := g2.Execute(t.Context(), "k", fpA, value(&runs, "v")); !errors.Is(err, middleware.ErrUnavailable) || runs.Load() != 0 {
		t.Fatalf("with the locker down: %v, runs %d", err, runs.Load())
	}
}

// countingLocker counts lock operations.
type countingLocker struct {
	lock.Locker
	acquires, releases atomic.Int32
}

func (c *countingLocker) Acquire(ctx context.Context, key string, ttl time.Duration) (lock.Lease, bool, error) {
	c.acquires.Add(1)
	return c.Locker.Acquire(ctx, key, ttl)
}

func (c *countingLocker) Release(ctx context.Context, id string) (lock.Outcome, error) {
	c.releases.Add(1)
	return c.Locker.Release(ctx, id)
}

func TestRoundTrips(t *testing.T) {
	fs := &flakyStore{Store: memstore.New()}
	cl := &countingLocker{Locker: memlock.New()}
	g := newGuard(t, fs, cl)
	var runs atomic.Int32
	if _, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v")); err != nil {
		t.Fatal(err)
	}
	if fs.gets.Load() != 2 || fs.puts.Load() != 1 || cl.acquires.Load() != 1 || cl.releases.Load() != 1 {
		t.Fatalf("first execution: %d gets, %d puts, %d acquires, %d releases; want 2, 1, 1, 1",
			fs.gets.Load(), fs.puts.Load(), cl.acquires.Load(), cl.releases.Load())
	}
	if _, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v")); err != nil {
		t.Fatal(err)
	}
	if fs.gets.Load() != 3 || cl.acquires.Load() != 1 {
		t.Fatalf("a replay cost %d gets and %d acquires; want 1 get and no lock", fs.gets.Load()-2, cl.acquires.Load()-1)
	}
}

func TestKeysAreIsolatedAndHashed(t *testing.T) {
	s := memstore.New()
	g := newGuard(t, s, memlock.New())
	var runs atomic.Int32
	keys := []string{"a", "A", "a ", "caf\u00e9", "cafe\u0301", "x/y", string(make([]byte, 2000)), "\x00"}
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
	if _, err := g.Execute(t.Context(), "", fpA, value(&runs, "x")); !errors.Is(err, middleware.ErrInvalidKey) {
		t.Fatalf("empty key: %v", err)
	}
}

func TestOptionValidation(t *testing.T) {
	s, l := memstore.New(), memlock.New()
	if _, err := middleware.New(nil, l); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("nil store: %v", err)
	}
	for i, o := range []middleware.Option{
		middleware.WithRecordTTL(0), middleware.WithLockTTL(time.Millisecond), middleware.WithLockRetries(-1),
		middleware.WithBaseDelay(0), middleware.WithMaxDelay(-1), middleware.WithWaitBudget(-1),
		middleware.WithRecordWriteTimeout(0), middleware.WithOpTimeout(0), middleware.WithNamespace(""), middleware.WithClock(nil), middleware.WithValueFingerprint(nil),
	} {
		if _, err := middleware.New(s, l, o); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("option %d: %v; want InvalidArgument", i, err)
		}
	}
}

func TestHookPanicIsContained(t *testing.T) {
	g := newGuard(t, memstore.New(), memlock.New(), middleware.WithHook(middleware.HookFunc(func(middleware.Event) { panic("hook") })))
	var runs atomic.Int32
	if out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v")); err != nil || !out.Recorded {
		t.Fatalf("Execute with a panicking hook: %+v, %v", out, err)
	}
}

// countingCombiner counts the calls a combining store receives.
type countingCombiner struct {
	*memstore.Store
	gets, acquireGets, putReleases, puts atomic.Int32
}

func (c *countingCombiner) Get(ctx context.Context, key string) (store.Record, bool, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, key)
}

func (c *countingCombiner) Put(ctx context.Context, r store.Record, ttl time.Duration) (bool, error) {
	c.puts.Add(1)
	return c.Store.Put(ctx, r, ttl)
}

func (c *countingCombiner) AcquireGet(ctx context.Context, lockKey string, ttl time.Duration, recordKey string) (lock.Lease, bool, store.Record, bool, error) {
	c.acquireGets.Add(1)
	return c.Store.AcquireGet(ctx, lockKey, ttl, recordKey)
}

func (c *countingCombiner) PutRelease(ctx context.Context, r store.Record, ttl time.Duration, lease lock.Lease) (bool, lock.Outcome, error) {
	c.putReleases.Add(1)
	return c.Store.PutRelease(ctx, r, ttl, lease)
}

// TestCombinedRoundTrips: with a store that combines lock operations, a
// first execution costs three calls (get, acquire+get, put+release) and a
// replay one.
func TestCombinedRoundTrips(t *testing.T) {
	l := memlock.New()
	cs := &countingCombiner{Store: memstore.New(memstore.WithLocker(l))}
	g := newGuard(t, cs, l)
	var runs atomic.Int32
	out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v"))
	if err != nil || !out.Recorded || out.Fence != 1 {
		t.Fatalf("first: %+v, %v", out, err)
	}
	if cs.gets.Load() != 1 || cs.acquireGets.Load() != 1 || cs.putReleases.Load() != 1 || cs.puts.Load() != 0 {
		t.Fatalf("calls: %d get, %d acquire+get, %d put+release, %d put; want 1, 1, 1, 0",
			cs.gets.Load(), cs.acquireGets.Load(), cs.putReleases.Load(), cs.puts.Load())
	}
	if locked, _ := l.IsLocked(t.Context(), "idempotency:lock:{k:k}"); locked {
		t.Fatal("the lock is still held after put+release")
	}
	out, err = g.Execute(t.Context(), "k", fpA, value(&runs, "again"))
	if err != nil || !out.Replayed || cs.gets.Load() != 2 || cs.acquireGets.Load() != 1 {
		t.Fatalf("replay: %+v, %v, %d gets", out, err, cs.gets.Load())
	}
	// A duplicate racing under the lock replays through the combined read.
	if _, err := g.Execute(t.Context(), "k2", fpA, value(&runs, "v2")); err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 2 {
		t.Fatalf("fn ran %d times", runs.Load())
	}
}

// TestExactlyOnceCombined is the race of TestExactlyOnceAcrossGuards on the
// combined path.
func TestExactlyOnceCombined(t *testing.T) {
	l := memlock.New()
	s := memstore.New(memstore.WithLocker(l))
	guards := make([]*middleware.Guard, 4)
	for i := range guards {
		guards[i] = newGuard(t, s, l, middleware.WithWaitBudget(30*time.Second))
	}
	for round := range 50 {
		key := fmt.Sprint("combined-", round)
		var runs atomic.Int32
		var wg sync.WaitGroup
		for i := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := guards[i%4].Execute(t.Context(), key, fpA, value(&runs, key))
				if err != nil || string(out.Value) != key {
					t.Errorf("%+v, %v", out, err)
				}
			}()
		}
		wg.Wait()
		if runs.Load() != 1 {
			t.Fatalf("round %d: fn ran %d times", round, runs.Load())
		}
	}
}

// gatedRelease holds every Release of a real locker until gate is closed.
type gatedRelease struct {
	lock.Locker
	gate     chan struct{}
	releases chan struct{}
}

func (g *gatedRelease) Release(ctx context.Context, id string) (lock.Outcome, error) {
	g.releases <- struct{}{}
	<-g.gate
	return g.Locker.Release(ctx, id)
}

// TestDuplicateReplaysWithoutTheLock: a duplicate waiting for the lock
// replays the record as soon as it appears, without taking the lock (here
// the first request's release is held up, so the lock stays taken).
func TestDuplicateReplaysWithoutTheLock(t *testing.T) {
	gl := &gatedRelease{Locker: memlock.New(), gate: make(chan struct{}), releases: make(chan struct{}, 1)}
	cl := &countingLocker{Locker: gl}
	g := newGuard(t, memstore.New(), cl, middleware.WithBaseDelay(time.Millisecond), middleware.WithMaxDelay(5*time.Millisecond),
		middleware.WithWaitBudget(time.Minute), middleware.WithLockRetries(1_000_000))
	var runs atomic.Int32
	finish := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := g.Execute(context.Background(), "k", fpA, func(context.Context) (middleware.Result, error) {
			runs.Add(1)
			<-finish
			return middleware.Result{Value: []byte("v")}, nil
		})
		first <- err
	}()
	dup := make(chan middleware.Outcome, 1)
	go func() {
		for cl.acquires.Load() < 1 { // the first request holds the lock
			time.Sleep(time.Millisecond)
		}
		out, err := g.Execute(context.Background(), "k", fpA, value(&runs, "dup"))
		if err != nil {
			t.Errorf("the duplicate: %v", err)
		}
		dup <- out
	}()
	for cl.acquires.Load() < 4 { // the duplicate is waiting: refused at least 3 times
		time.Sleep(time.Millisecond)
	}
	close(finish) // the first request records its outcome...
	<-gl.releases // ...and its release is held up: the lock stays taken
	out := <-dup
	if !out.Replayed || string(out.Value) != "v" {
		t.Fatalf("the duplicate: %+v; want a replay while the lock was still taken", out)
	}
	close(gl.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times", runs.Load())
	}
}
