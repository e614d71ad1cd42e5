package lock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// These cases check the helpers where the engine plays no part; what
// involves it runs on every engine in lock/locktest.

func isLocked(t *testing.T, l lock.Locker, k string) bool {
	t.Helper()
	locked, err := l.IsLocked(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	return locked
}

// telemetry is lock.WithTelemetry over a fresh client, failing t on an
// error.
func telemetry(t *testing.T, r lock.Reporter, opts ...lock.Option) lock.Locker {
	t.Helper()
	l, err := lock.WithTelemetry(newClient(), r, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// slowRelease delays every Release of the locker it wraps until gate is
// closed or the call's ctx ends, and records when the real release started
// and finished. It injects a slow network into a real client.
type slowRelease struct {
	lock.Locker
	gate     chan struct{}
	started  chan struct{} // receives one value per Release call
	finished atomic.Bool
}

func newSlowRelease(l lock.Locker) *slowRelease {
	return &slowRelease{Locker: l, gate: make(chan struct{}), started: make(chan struct{}, 16)}
}

// Release waits for the gate (or ctx), then releases through the real locker.
func (s *slowRelease) Release(ctx context.Context, id string) (lock.Status, error) {
	s.started <- struct{}{}
	select {
	case <-s.gate:
	case <-ctx.Done():
		return lock.Status{}, idemkit.CheckContext(ctx, "release")
	}
	out, err := s.Locker.Release(ctx, id)
	s.finished.Store(true)
	return out, err
}

func TestCloseWaitsForInFlightRelease(t *testing.T) {
	locker := newClient()
	slow := newSlowRelease(locker)
	h, _, err := lock.Acquire(t.Context(), slow, "k", time.Minute, lock.WithReleaseTimeout(time.Minute))
	if err != nil || h == nil {
		t.Fatalf("Acquire: %v", err)
	}
	released := make(chan lock.Status, 1)
	go func() {
		out, _ := h.Release(t.Context())
		released <- out
	}()
	<-slow.started // the manual release is in flight
	closed := make(chan bool, 1)
	go func() {
		h.Close()
		closed <- slow.finished.Load()
	}()
	time.Sleep(50 * time.Millisecond) // give a wrong Close time to return early
	close(slow.gate)
	if out := <-released; !out.OK {
		t.Fatalf("the manual release: %+v", out)
	}
	if finished := <-closed; !finished {
		t.Fatal("Close returned before the in-flight release finished")
	}
}

func TestCloseTimeoutReported(t *testing.T) {
	locker := newClient()
	k := "k"
	slow := newSlowRelease(locker) // its gate never opens
	var mu sync.Mutex
	var failures []lock.ReleaseFailure
	h, _, err := lock.Acquire(t.Context(), slow, k, time.Minute,
		lock.WithReleaseTimeout(2*50*time.Millisecond),
		lock.WithOnReleaseError(func(f lock.ReleaseFailure) {
			mu.Lock()
			failures = append(failures, f)
			mu.Unlock()
		}))
	if err != nil || h == nil {
		t.Fatalf("Acquire: %v", err)
	}
	h.Close() // must return by its deadline, not hang
	mu.Lock()
	defer mu.Unlock()
	if len(failures) != 1 {
		t.Fatalf("%d failures reported; want 1", len(failures))
	}
	if f := failures[0]; f.Source != "close" || idemkit.CodeOf(f.Err) != idemkit.CodeNetworkTimeout {
		t.Fatalf("failure %+v; want a NetworkTimeout from close", f)
	}
	if !isLocked(t, locker, k) {
		t.Fatal("the lock is gone although its release never reached the backend")
	}
}

func TestTelemetryRawOnlyWhenAllowed(t *testing.T) {
	ctx := t.Context()
	k := "k"
	var events []lock.Report
	hook := lock.ReporterFunc(func(ev lock.Report) { events = append(events, ev) })
	allowAcquire := lock.WithRawIdentifiers(func(ev lock.Report) bool {
		if ev.Key != "" || ev.ID != "" {
			t.Error("the predicate saw raw identifiers")
		}
		if ev.Op == "is-locked" {
			panic("predicate panic")
		}
		return ev.Op == "acquire"
	})
	l := telemetry(t, hook, allowAcquire, lock.WithHasher(idemkit.NewHMACHasher([]byte("shared secret"))))
	lease, _, _ := l.Acquire(ctx, k, time.Minute)
	_, _ = l.IsLocked(ctx, k)
	_, _ = l.Release(ctx, lease.ID)
	if len(events) != 3 {
		t.Fatalf("%d events; want 3", len(events))
	}
	if events[0].Key != k || events[0].ID != lease.ID {
		t.Fatalf("allowed acquire event lacks raw values: %+v", events[0])
	}
	if events[1].Key != "" || events[2].ID != "" {
		t.Fatal("raw values leaked past a refusing or panicking predicate")
	}
	if want := idemkit.NewHMACHasher([]byte("shared secret")).Hash(k); events[1].KeyHash != want {
		t.Fatalf("key hash %q under the shared secret; want %q", events[1].KeyHash, want)
	}
}

func TestTelemetryHookCannotChangeResults(t *testing.T) {
	for _, hook := range []lock.ReporterFunc{
		func(lock.Report) { panic("hook panic") },
		func(lock.Report) { time.Sleep(time.Millisecond) },
	} {
		l := telemetry(t, hook)
		k := "k"
		lease, ok, err := l.Acquire(t.Context(), k, time.Minute)
		if err != nil || !ok {
			t.Fatalf("Acquire through a faulty hook: %v, %v", ok, err)
		}
		if locked, err := l.IsLocked(t.Context(), k); err != nil || !locked {
			t.Fatalf("IsLocked through a faulty hook: %v, %v", locked, err)
		}
		if out, err := l.Release(t.Context(), lease.ID); err != nil || !out.OK {
			t.Fatalf("Release through a faulty hook: %+v, %v", out, err)
		}
	}
}
