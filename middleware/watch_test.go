package middleware_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// slowPolls is a poll back-off far above any notification delay: a
// duplicate that polled could not answer before it.
var slowPolls = middleware.WithBackoff(idemkit.Backoff{Base: 20 * time.Second, Max: 20 * time.Second})

// awaitDuplicates runs a first call that holds key until its work is
// released, and n duplicates that wait for it (each on one of the
// guards, in turn), then ends the work and returns how long after its end
// each duplicate answered, failing on any duplicate that did not replay.
func awaitDuplicates(t *testing.T, guards []*middleware.Guard, waiting func() int, n int) []time.Duration {
	t.Helper()
	ctx := t.Context()
	release, started := make(chan struct{}), make(chan struct{})
	var ended time.Time
	first := make(chan error, 1)
	go func() {
		_, err := guards[0].Execute(ctx, "k", fpA, func(context.Context) (middleware.Result, error) {
			close(started)
			<-release
			ended = time.Now()
			return middleware.Result{Value: []byte("v")}, nil
		})
		first <- err
	}()
	<-started
	delays := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			out, err := guards[i%len(guards)].Execute(ctx, "k", fpA, func(context.Context) (middleware.Result, error) {
				t.Error("a duplicate ran the work")
				return middleware.Result{}, nil
			})
			if err != nil || !out.Replayed || string(out.Value) != "v" {
				t.Errorf("duplicate %d: %+v, %v; want a replay", i, out, err)
			}
			delays[i] = time.Now().Sub(ended)
		})
	}
	for waiting() < n {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	return delays
}

// TestDuplicatesWokenByNotification: on a store that notifies (memory,
// and any record store composed with a lock provider that notifies),
// waiting duplicates answer as soon as the outcome is written, long
// before their next poll, across two guards sharing the backend.
func TestDuplicatesWokenByNotification(t *testing.T) {
	for _, c := range []struct {
		name  string
		store func(t *testing.T) store.Store
	}{
		{"memory", func(*testing.T) store.Store { return memstore.New() }},
		{"composed", func(t *testing.T) store.Store {
			s, err := middleware.Compose(memstore.New(), newLocker(t, memstore.New()))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"composed, a locker that wakes one waiter per release", func(t *testing.T) store.Store {
			s, err := middleware.Compose(memstore.New(), &wakeOneLocker{Client: newLocker(t, memstore.New())})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.store(t)
			if _, ok := s.(store.Watcher); !ok {
				t.Fatal("the store does not notify")
			}
			var mu sync.Mutex
			waiting := 0
			hook := middleware.WithHook(middleware.HookFunc(func(_ context.Context, e middleware.Event) {
				if e.Kind == middleware.EventWaiting {
					mu.Lock()
					waiting++
					mu.Unlock()
				}
			}))
			opts := []middleware.Option{slowPolls, middleware.WithWaitBudget(time.Minute), hook}
			guards := []*middleware.Guard{newGuard(t, s, opts...), newGuard(t, s, opts...)}
			delays := awaitDuplicates(t, guards, func() int { mu.Lock(); defer mu.Unlock(); return waiting }, 64)
			for i, d := range delays {
				// A poll comes 10 s at the earliest (half the back-off,
				// with jitter): only the notification answers sooner.
				if d >= 10*time.Second {
					t.Fatalf("duplicate %d answered %v after the work ended: it polled", i, d)
				}
			}
		})
	}
}

// wakeOneLocker is a lock provider that wakes the waiters of a key one at
// a time, the oldest first (only one of them can take the lock), as the
// Redis provider does: a release closes one watch's channel.
type wakeOneLocker struct {
	*lock.Client
	mu      sync.Mutex
	waiting map[string][]chan struct{}
}

func (l *wakeOneLocker) Watch(_ context.Context, key string) (<-chan struct{}, func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiting == nil {
		l.waiting = make(map[string][]chan struct{})
	}
	ch := make(chan struct{})
	l.waiting[key] = append(l.waiting[key], ch)
	return ch, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.waiting[key] = slices.DeleteFunc(l.waiting[key], func(c chan struct{}) bool { return c == ch })
	}
}

func (l *wakeOneLocker) wakeOne(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q := l.waiting[key]; len(q) > 0 {
		close(q[0])
		l.waiting[key] = q[1:]
	}
}

func (l *wakeOneLocker) ReleaseKey(ctx context.Context, key, id string) (lock.Status, error) {
	out, err := l.Client.ReleaseKey(ctx, key, id)
	l.wakeOne(key)
	return out, err
}

func (l *wakeOneLocker) Release(context.Context, string) (lock.Status, error) {
	panic("the composed store releases by key")
}

// silentWatcher is a store whose watches never fire: a lost notification.
type silentWatcher struct {
	store.Store
	watches int
	mu      sync.Mutex
}

func (s *silentWatcher) Watch(context.Context, string) (<-chan struct{}, func()) {
	s.mu.Lock()
	s.watches++
	s.mu.Unlock()
	return nil, func() {}
}

// TestLostNotificationFallsBackToPolling: when no notification comes, a
// waiting duplicate still gets its replay by polling, within its budget.
func TestLostNotificationFallsBackToPolling(t *testing.T) {
	s := &silentWatcher{Store: memstore.New()}
	var mu sync.Mutex
	waiting := 0
	hook := middleware.WithHook(middleware.HookFunc(func(_ context.Context, e middleware.Event) {
		if e.Kind == middleware.EventWaiting {
			mu.Lock()
			waiting++
			mu.Unlock()
		}
	}))
	g := newGuard(t, s, middleware.WithBackoff(idemkit.Backoff{Base: 5 * time.Millisecond, Max: 20 * time.Millisecond}),
		middleware.WithWaitBudget(time.Minute), hook)
	awaitDuplicates(t, []*middleware.Guard{g}, func() int { mu.Lock(); defer mu.Unlock(); return waiting }, 8)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watches != 8 {
		t.Fatalf("%d watches; want one per waiting duplicate (8)", s.watches)
	}
}

// countingWatcher is a notifying memory store that counts the claims made
// once armed, and holds the first of them for hold, so that every woken
// duplicate is on its way before that claim answers.
type countingWatcher struct {
	*memstore.Store
	hold     time.Duration
	mu       sync.Mutex
	armed    bool
	claims   int
	watches  int       // Watch calls
	inflight int       // claims under way
	lastEnd  time.Time // when the last claim returned
}

func (s *countingWatcher) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	s.mu.Lock()
	s.watches++
	s.mu.Unlock()
	return s.Store.Watch(ctx, key)
}

// settled reports whether n watches were set and no claim has been under
// way for a while: every duplicate has made the claim that follows its
// watch, and waits.
func (s *countingWatcher) settled(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watches >= n && s.inflight == 0 && time.Since(s.lastEnd) > 50*time.Millisecond
}

func (s *countingWatcher) arm() { s.mu.Lock(); s.armed = true; s.mu.Unlock() }

func (s *countingWatcher) count() int { s.mu.Lock(); defer s.mu.Unlock(); return s.claims }

func (s *countingWatcher) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	s.mu.Lock()
	first := s.armed && s.claims == 0
	if s.armed {
		s.claims++
	}
	s.inflight++
	s.mu.Unlock()
	if first {
		time.Sleep(s.hold)
	}
	defer func() {
		s.mu.Lock()
		s.inflight--
		s.lastEnd = time.Now()
		s.mu.Unlock()
	}()
	return s.Store.Claim(ctx, key, fp, ttl)
}

// waitingCounter returns a hook counting waiting events and a function
// reading the count.
func waitingCounter() (middleware.Option, func() int) {
	var mu sync.Mutex
	n := 0
	hook := middleware.WithHook(middleware.HookFunc(func(_ context.Context, e middleware.Event) {
		if e.Kind == middleware.EventWaiting {
			mu.Lock()
			n++
			mu.Unlock()
		}
	}))
	return hook, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// TestWokenDuplicatesShareOneClaim: the duplicates of one request waiting
// in one process are woken together and share one claim to the backend,
// which answers all of them with the replay.
func TestWokenDuplicatesShareOneClaim(t *testing.T) {
	s := &countingWatcher{Store: memstore.New(), hold: 200 * time.Millisecond}
	hook, waiting := waitingCounter()
	g := newGuard(t, s, slowPolls, middleware.WithWaitBudget(time.Minute), hook)
	ctx := t.Context()
	release, started := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := g.Execute(ctx, "k", fpA, func(context.Context) (middleware.Result, error) {
			close(started)
			<-release
			s.arm() // the completion is not counted; the claims after it are
			return middleware.Result{Value: []byte("v")}, nil
		})
		first <- err
	}()
	<-started
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			out, err := g.Execute(ctx, "k", fpA, func(context.Context) (middleware.Result, error) {
				t.Error("a duplicate ran the work")
				return middleware.Result{}, nil
			})
			if err != nil || !out.Replayed || string(out.Value) != "v" {
				t.Errorf("duplicate %d: %+v, %v; want a replay", i, out, err)
			}
		})
	}
	for waiting() < n || !s.settled(n) {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// One claim for the 64 duplicates; a duplicate the scheduler woke only
	// after the shared claim had answered claims once more on its own (it
	// is rare: the shared claim is held for 200 ms).
	if got := s.count(); got < 1 || got > 1+n/4 {
		t.Fatalf("%d claims after the outcome for %d woken duplicates; want about 1", got, n)
	}
}

// TestWokenDuplicatesClaimForThemselves: when the request they wait for
// fails (its claim is released, nothing stored), the woken duplicates do
// not share the claim one of them wins: exactly one runs the work, and
// every other replays its outcome.
func TestWokenDuplicatesClaimForThemselves(t *testing.T) {
	hook, waiting := waitingCounter()
	g := newGuard(t, memstore.New(), slowPolls, middleware.WithWaitBudget(time.Minute), hook)
	ctx := t.Context()
	release, started := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := g.Execute(ctx, "k", fpA, func(context.Context) (middleware.Result, error) {
			close(started)
			<-release
			return middleware.Result{}, errors.New("declined")
		})
		first <- err
	}()
	<-started
	const n = 64
	var runs, replays atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			out, err := g.Execute(ctx, "k", fpA, func(context.Context) (middleware.Result, error) {
				runs.Add(1)
				time.Sleep(20 * time.Millisecond)
				return middleware.Result{Value: []byte("second")}, nil
			})
			if err != nil || string(out.Value) != "second" {
				t.Errorf("duplicate %d: %+v, %v; want the second execution's value", i, out, err)
			}
			if out.Replayed {
				replays.Add(1)
			}
		})
	}
	for waiting() < n {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if err := <-first; err == nil {
		t.Fatal("the first call succeeded; want its error")
	}
	if runs.Load() != 1 || replays.Load() != n-1 {
		t.Fatalf("%d executions and %d replays among %d duplicates; want 1 and %d", runs.Load(), replays.Load(), n, n-1)
	}
}
