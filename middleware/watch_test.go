package middleware_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock/memlock"
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
			s, err := store.Compose(memstore.New(), memlock.New())
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
