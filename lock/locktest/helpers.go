package locktest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/store"
)

func init() {
	register(
		testCase{"DoRunsFnWhileHolding", testDoHolds},
		testCase{"DoReleasesOnPanic", testDoPanic},
		testCase{"DoRetriesOnlyOnContentionUntilTimeout", testDoRetries},
		testCase{"DoRetriesTransientErrorsWhenAsked", testDoTransient},
		testCase{"DoFinalAttemptAtDeadline", testDoDeadline},
		testCase{"DoStopsWhenContextEnds", testDoContext},
		testCase{"DoWakesWhenLockReleased", testDoWakes},
		testCase{"DoReleasesOnDetachedContext", testDoDetached},
		testCase{"DoRenewsLease", testDoRenews},
		testCase{"DoReportsLeaseLoss", testDoLeaseLost},
		testCase{"DoReleaseFailureToCallback", testDoReleaseFailure},
		testCase{"HandleReleaseAtMostOnce", testHandleOnce},
		testCase{"CloseWaitsForInFlightRelease", testHandleCloseWaits},
		testCase{"CloseTimeoutReported", testHandleCloseTimeout},
		testCase{"FailedAcquireHandleIsNoOp", testHandleNil},
		testCase{"TelemetryOneEventPerOp", testTelemetry},
		testCase{"TelemetryRawOnlyWhenAllowed", testTelemetryRaw},
		testCase{"TelemetryHookCannotChangeResults", testTelemetryHookFaults},
		testCase{"TelemetryReportsErrors", testTelemetryErrors},
	)
}

// recorder collects telemetry events.
type recorder struct {
	mu     sync.Mutex
	events []lock.Report
	notify chan lock.Report
}

func newRecorder() *recorder { return &recorder{notify: make(chan lock.Report, 1024)} }

// LockReport records e and offers it to waiters.
func (r *recorder) LockReport(e lock.Report) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	select {
	case r.notify <- e:
	default:
	}
}

func (r *recorder) all() []lock.Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]lock.Report(nil), r.events...)
}

func (r *recorder) count(op string) int {
	n := 0
	for _, e := range r.all() {
		if e.Op == op {
			n++
		}
	}
	return n
}

// waitFor waits until an event of op satisfying ok arrives, and reports
// whether one did. It may run on any goroutine: a missing event is a test
// error, not a FailNow.
func (r *recorder) waitFor(t *testing.T, op string, ok func(lock.Report) bool) bool {
	t.Helper()
	guard := time.NewTimer(30 * time.Second)
	defer guard.Stop()
	for {
		select {
		case e := <-r.notify:
			if e.Op == op && ok(e) {
				return true
			}
		case <-guard.C:
			t.Errorf("no %s event arrived within 30s", op)
			return false
		}
	}
}

// instrumented wraps the Env's locker with a recorder.
func instrumented(t *testing.T, e *env) (lock.Locker, *recorder) {
	r := newRecorder()
	return telemetry(t, e.Locker, r), r
}

// telemetry is lock.WithTelemetry, failing t on an error.
func telemetry(t *testing.T, l lock.Locker, r lock.Reporter, opts ...lock.Option) lock.Locker {
	t.Helper()
	tl, err := lock.WithTelemetry(l, r, opts...)
	if err != nil {
		t.Fatalf("WithTelemetry: %v", err)
	}
	return tl
}

var errFn = errors.New("locktest: fn failed")

// hourly is a back-off whose delays never run out during a test.
var hourly = idemkit.Backoff{Base: time.Hour, Max: time.Hour}

func testDoHolds(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	ran := false
	err := lock.Do(t.Context(), e.Locker, k, func(ctx context.Context, lease lock.Lease) error {
		ran = true
		if !isLocked(t, e, k) {
			t.Error("fn runs without the lock held")
		}
		if _, ok, _ := e.Locker.Acquire(ctx, k, longTTL); ok {
			t.Error("another acquire succeeded while fn held the lock")
		}
		if info, ok := lookupKey(t, e, k); !ok || info.Fence != lease.Fence {
			t.Errorf("fn's lease %v is not the live lock %v", lease, info)
		}
		return errFn
	}, lock.WithTTL(longTTL))
	if !ran {
		t.Fatal("fn did not run")
	}
	if !errors.Is(err, errFn) {
		t.Fatalf("Do returned %v; want fn's error", err)
	}
	if isLocked(t, e, k) {
		t.Fatal("still locked after Do returned")
	}
	if err := lock.Do(t.Context(), e.Locker, k, func(context.Context, lock.Lease) error { return nil }); err != nil {
		t.Fatalf("Do with a nil-returning fn: %v", err)
	}
}

func testDoPanic(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v; want the fn's panic to go on", r)
			}
		}()
		_ = lock.Do(t.Context(), e.Locker, k, func(context.Context, lock.Lease) error { panic("boom") })
		t.Fatal("Do returned after fn panicked")
	}()
	if isLocked(t, e, k) {
		t.Fatal("the lock is still held after fn panicked")
	}
}

func testDoRetries(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	acquire(t, e, k, longTTL)
	l, rec := instrumented(t, e)
	delay := e.Margin / 5
	timeout := 4 * e.Margin
	err := lock.Do(t.Context(), l, k, func(context.Context, lock.Lease) error {
		t.Error("fn ran without the lock")
		return nil
	}, lock.WithBackoff(idemkit.Backoff{Base: delay, Max: delay}), lock.WithTimeout(timeout))
	wantCode(t, "Do on a held key", err, idemkit.CodeAcquisitionTimeout)
	// Attempts are paced by the back-off (every delay is at least Base/2)
	// and go on until the timeout, with a last one at the deadline.
	n := rec.count("acquire")
	if most := int(timeout/(delay/2)) + 2; n < 2 || n > most {
		t.Fatalf("%d acquire attempts; want between 2 and %d", n, most)
	}

	// A backend error is not contention: no retry by default.
	b := s.env(t)
	bl, brec := instrumented(t, b)
	b.Break()
	err = lock.Do(t.Context(), bl, k, func(context.Context, lock.Lease) error { return nil },
		lock.WithBackoff(idemkit.Backoff{Base: time.Millisecond, Max: time.Millisecond}))
	if code := idemkit.CodeOf(err); code != idemkit.CodeServiceUnavailable && code != idemkit.CodeNetworkTimeout {
		t.Fatalf("Do on a broken backend: %v; want the backend's error", err)
	}
	if n := brec.count("acquire"); n != 1 {
		t.Fatalf("%d attempts on a backend error; want 1 (no retry)", n)
	}
}

func testDoTransient(t *testing.T, s *suite) {
	e := s.env(t)
	l, rec := instrumented(t, e)
	e.Break()
	delay := e.Margin / 5
	err := lock.Do(t.Context(), l, key(t, "k"), func(context.Context, lock.Lease) error { return nil },
		lock.WithRetryTransient(true), lock.WithBackoff(idemkit.Backoff{Base: delay, Max: delay}), lock.WithTimeout(4*e.Margin))
	wantCode(t, "Do with transient retries", err, idemkit.CodeAcquisitionTimeout)
	if !errors.Is(err, idemkit.ErrServiceUnavailable) && !errors.Is(err, idemkit.ErrNetworkTimeout) {
		t.Fatalf("the final error %v does not wrap the last backend failure", err)
	}
	if n := rec.count("acquire"); n < 2 {
		t.Fatalf("%d attempts; want the transient failure retried", n)
	}
}

func testDoDeadline(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	acquire(t, e, k, longTTL)
	l, rec := instrumented(t, e)
	timeout := 3 * e.Margin
	start := time.Now()
	err := lock.Do(t.Context(), l, k, func(context.Context, lock.Lease) error { return nil },
		lock.WithTimeout(timeout), lock.WithBackoff(hourly))
	elapsed := time.Since(start)
	wantCode(t, "Do past its timeout", err, idemkit.CodeAcquisitionTimeout)
	// The hour-long delay is clamped to the deadline, and one last attempt
	// is made there.
	if n := rec.count("acquire"); n != 2 {
		t.Fatalf("%d attempts; want 2 (the first, and a last one at the deadline)", n)
	}
	if elapsed < timeout {
		t.Fatalf("Do gave up after %v, before its timeout %v", elapsed, timeout)
	}
}

func testDoContext(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	acquire(t, e, k, longTTL)
	l, rec := instrumented(t, e)
	long := []lock.Option{lock.WithTimeout(time.Hour), lock.WithBackoff(hourly)}

	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		rec.waitFor(t, "acquire", func(lock.Report) bool { return true })
		cancel()
	}()
	err := lock.Do(ctx, l, k, func(context.Context, lock.Lease) error { return nil }, long...)
	wantCode(t, "Do cancelled while waiting", err, idemkit.CodeAborted)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%v does not match context.Canceled", err)
	}

	dctx, dcancel := context.WithTimeout(t.Context(), 2*e.Margin)
	defer dcancel()
	err = lock.Do(dctx, l, k, func(context.Context, lock.Lease) error { return nil }, long...)
	wantCode(t, "Do whose ctx deadline passed while waiting", err, idemkit.CodeAcquisitionTimeout)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v does not match context.DeadlineExceeded", err)
	}
}

func testDoWakes(t *testing.T, s *suite) {
	e := s.env(t)
	if _, ok := e.Store.(store.Watcher); !ok {
		t.Skip("the engine is not a store.Watcher; waiters wake by back-off only")
	}
	k := key(t, "k")
	holder := acquire(t, e, k, longTTL)
	l, rec := instrumented(t, e)
	go func() {
		rec.waitFor(t, "acquire", func(ev lock.Report) bool { return ev.Reason == "locked" })
		if out, err := e.Locker.Release(t.Context(), holder.ID); err != nil || !out.OK {
			t.Errorf("the holder's release: %+v, %v", out, err)
		}
	}()
	// An hour-long delay: only the release notification can wake Do
	// before its ctx runs out.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := lock.Do(ctx, l, k, func(context.Context, lock.Lease) error { return nil },
		lock.WithTimeout(time.Hour), lock.WithBackoff(hourly))
	if err != nil {
		t.Fatalf("Do was not woken by the release: %v", err)
	}
}

func testDoDetached(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	ctx, cancel := context.WithCancel(t.Context())
	err := lock.Do(ctx, e.Locker, k, func(ctx context.Context, _ lock.Lease) error {
		cancel() // the caller goes away while fn runs
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Do: %v; want fn's context.Canceled", err)
	}
	if isLocked(t, e, k) {
		t.Fatal("the lease was not released after the caller's ctx was cancelled")
	}
}

func testDoRenews(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	l, rec := instrumented(t, e)
	ttl := 6 * e.Margin
	const renewals = 4
	err := lock.Do(t.Context(), l, k, func(ctx context.Context, lease lock.Lease) error {
		// Outlive the TTL several times over; each renewal must keep
		// the lease.
		for range renewals {
			if !rec.waitFor(t, "extend", func(ev lock.Report) bool {
				if !ev.OK {
					t.Errorf("a renewal failed: %+v", ev)
				}
				return true
			}) {
				return nil
			}
			if e.fake() {
				e.Advance(ttl / 2)
			}
		}
		if ctx.Err() != nil {
			t.Errorf("fn's ctx ended although renewals succeeded: %v", context.Cause(ctx))
		}
		info, ok := lookupKey(t, e, k)
		if !ok || info.Fence != lease.Fence {
			t.Errorf("the lease was lost despite renewal: %v, %v", info, ok)
		}
		return nil
	}, lock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
}

func testDoLeaseLost(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	err := lock.Do(t.Context(), e.Locker, k, func(ctx context.Context, lease lock.Lease) error {
		// Someone else removes the lease (as an expiry and takeover would).
		release(t, e, lease.ID)
		select {
		case <-ctx.Done():
		case <-time.After(30 * time.Second):
			t.Error("fn's ctx was not cancelled after the lease was lost")
		}
		if !errors.Is(context.Cause(ctx), idemkit.ErrLeaseLost) {
			t.Errorf("fn's ctx cause %v; want ErrLeaseLost", context.Cause(ctx))
		}
		return nil
	}, lock.WithTTL(longTTL), lock.WithRenewInterval(e.Margin))
	if !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("Do: %v; want an error matching ErrLeaseLost", err)
	}
}

func testDoReleaseFailure(t *testing.T, s *suite) {
	for _, panicking := range []bool{false, true} {
		e := s.env(t)
		var failures []lock.ReleaseFailure
		err := lock.Do(t.Context(), e.Locker, key(t, "k"), func(context.Context, lock.Lease) error {
			e.Break() // the release after fn will fail
			return errFn
		}, lock.WithOnReleaseError(func(f lock.ReleaseFailure) {
			failures = append(failures, f)
			if panicking {
				panic("callback panic")
			}
		}))
		if !errors.Is(err, errFn) || idemkit.CodeOf(err) != idemkit.CodeUnknown {
			t.Fatalf("Do: %v; want exactly fn's error, unmasked by the release failure", err)
		}
		if len(failures) != 1 {
			t.Fatalf("%d release failures reported; want 1", len(failures))
		}
		f := failures[0]
		if f.Source != "do" || f.Err == nil || idemkit.CodeOf(f.Err) == idemkit.CodeUnknown {
			t.Fatalf("release failure %+v; want source do and a coded error", f)
		}
	}
}

func testHandleOnce(t *testing.T, s *suite) {
	e := s.env(t)
	l, rec := instrumented(t, e)
	h, ok, err := lock.Acquire(t.Context(), l, key(t, "k"), longTTL)
	if err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	if out, err := h.Release(t.Context()); err != nil || !out.OK {
		t.Fatalf("first release: %+v, %v", out, err)
	}
	if out, err := h.Release(t.Context()); err != nil || out.OK {
		t.Fatalf("second release: %+v, %v; want not OK", out, err)
	}
	h.Close()
	h.Close()
	if n := rec.count("release"); n != 1 {
		t.Fatalf("%d backend releases; want exactly 1", n)
	}

	// Concurrent closes share one backend call.
	h2, _, err := lock.Acquire(t.Context(), l, key(t, "k2"), longTTL)
	if err != nil || h2 == nil {
		t.Fatalf("Acquire: %v", err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); h2.Close() }()
	}
	wg.Wait()
	if n := rec.count("release"); n != 2 {
		t.Fatalf("%d backend releases after 8 concurrent closes; want 2 in all", n)
	}
	if isLocked(t, e, key(t, "k2")) {
		t.Fatal("still locked after Close")
	}
}

// slowRelease delays every Release of the locker it wraps until gate is
// closed or the call's ctx ends, and records when the real release started
// and finished. It injects a slow network into a real provider.
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

func testHandleCloseWaits(t *testing.T, s *suite) {
	e := s.env(t)
	slow := newSlowRelease(e.Locker)
	h, _, err := lock.Acquire(t.Context(), slow, key(t, "k"), longTTL, lock.WithReleaseTimeout(time.Minute))
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
	time.Sleep(e.Margin) // give a wrong Close time to return early
	close(slow.gate)
	if out := <-released; !out.OK {
		t.Fatalf("the manual release: %+v", out)
	}
	if finished := <-closed; !finished {
		t.Fatal("Close returned before the in-flight release finished")
	}
}

func testHandleCloseTimeout(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	slow := newSlowRelease(e.Locker) // its gate never opens
	var mu sync.Mutex
	var failures []lock.ReleaseFailure
	h, _, err := lock.Acquire(t.Context(), slow, k, longTTL,
		lock.WithReleaseTimeout(2*e.Margin),
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
	if !isLocked(t, e, k) {
		t.Fatal("the lock is gone although its release never reached the backend")
	}
}

func testHandleNil(t *testing.T, s *suite) {
	e := s.env(t)
	k := key(t, "k")
	acquire(t, e, k, longTTL)
	l, rec := instrumented(t, e)
	h, ok, err := lock.Acquire(t.Context(), l, k, longTTL)
	if err != nil || ok || h != nil {
		t.Fatalf("Acquire on a held key = %v, %v, %v; want nil, false, nil", h, ok, err)
	}
	if out, err := h.Release(t.Context()); err != nil || out.OK {
		t.Fatalf("nil handle Release = %+v, %v", out, err)
	}
	if out, err := h.Extend(t.Context(), time.Second); err != nil || out.OK {
		t.Fatalf("nil handle Extend = %+v, %v", out, err)
	}
	h.Close()
	if (h.Lease() != lock.Lease{}) {
		t.Fatal("nil handle has a lease")
	}
	if n := len(rec.all()); n != 1 {
		t.Fatalf("%d backend calls; want only the failed acquire", n)
	}
}

func testTelemetry(t *testing.T, s *suite) {
	e := s.env(t)
	l, rec := instrumented(t, e)
	ctx := t.Context()
	k := key(t, "k")
	lease, _, _ := l.Acquire(ctx, k, longTTL)
	_, _, _ = l.Acquire(ctx, k, longTTL)
	_, _ = l.Extend(ctx, lease.ID, longTTL)
	_, _ = l.IsLocked(ctx, k)
	_, _, _ = l.LookupKey(ctx, k)
	_, _, _ = l.LookupID(ctx, lease.ID)
	_, _ = l.Release(ctx, lease.ID)
	_, _ = l.Release(ctx, lease.ID)
	_, _ = l.Extend(ctx, lease.ID, longTTL)
	_, _ = l.IsLocked(ctx, k)

	want := []struct {
		op     string
		ok     bool
		reason string
		byKey  bool
	}{
		{"acquire", true, "", true},
		{"acquire", false, "locked", true},
		{"extend", true, "", false},
		{"is-locked", true, "", true},
		{"lookup-key", true, "", true},
		{"lookup-id", true, "", false},
		{"release", true, "", false},
		{"release", false, "not-found", false},
		{"extend", false, "not-found", false},
		{"is-locked", false, "", true},
	}
	got := rec.all()
	if len(got) != len(want) {
		t.Fatalf("%d events for %d operations", len(got), len(want))
	}
	keyHash := idemkit.DefaultHasher().Hash(k)
	idHash := idemkit.DefaultHasher().Hash(lease.ID)
	for i, w := range want {
		ev := got[i]
		if ev.Op != w.op || ev.OK != w.ok || ev.Reason != w.reason || ev.Err != nil {
			t.Fatalf("event %d = %+v; want op %s ok %v reason %q", i, ev, w.op, w.ok, w.reason)
		}
		if w.byKey && ev.KeyHash != keyHash {
			t.Fatalf("event %d: key hash %q; want %q", i, ev.KeyHash, keyHash)
		}
		if !w.byKey && ev.IDHash != idHash {
			t.Fatalf("event %d: id hash %q; want %q", i, ev.IDHash, idHash)
		}
		if ev.Key != "" || ev.ID != "" {
			t.Fatalf("event %d carries raw identifiers by default", i)
		}
		if ev.Duration <= 0 {
			t.Fatalf("event %d has no duration", i)
		}
	}
	if got[0].Fence != lease.Fence || got[0].IDHash != idHash {
		t.Fatalf("the acquire event does not name the lease: %+v", got[0])
	}
}

func testTelemetryRaw(t *testing.T, s *suite) {
	e := s.env(t)
	ctx := t.Context()
	k := key(t, "k")
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
	l := telemetry(t, e.Locker, hook, allowAcquire, lock.WithHasher(idemkit.NewHMACHasher([]byte("shared secret"))))
	lease, _, _ := l.Acquire(ctx, k, longTTL)
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

func testTelemetryHookFaults(t *testing.T, s *suite) {
	for _, hook := range []lock.ReporterFunc{
		func(lock.Report) { panic("hook panic") },
		func(lock.Report) { time.Sleep(time.Millisecond) },
	} {
		e := s.env(t)
		l := telemetry(t, e.Locker, hook)
		k := key(t, "k")
		lease, ok, err := l.Acquire(t.Context(), k, longTTL)
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

func testTelemetryErrors(t *testing.T, s *suite) {
	e := s.env(t)
	l, rec := instrumented(t, e)
	k := key(t, "secret-key")
	lease, _, _ := l.Acquire(t.Context(), k, longTTL)
	_, _, err := l.Acquire(t.Context(), "", longTTL)
	wantCode(t, "empty key", err, idemkit.CodeInvalidArgument)
	e.Break()
	_, _ = l.Release(t.Context(), lease.ID)
	evs := rec.all()
	if len(evs) != 3 {
		t.Fatalf("%d events; want 3 (errors included)", len(evs))
	}
	for _, ev := range evs[1:] {
		if ev.Err == nil || ev.Code == idemkit.CodeUnknown || ev.OK {
			t.Fatalf("error event %+v lacks its error or code", ev)
		}
		if strings.Contains(ev.Err.Error(), "secret-key") || strings.Contains(ev.Err.Error(), lease.ID) {
			t.Fatalf("error message contains a raw identifier: %v", ev.Err)
		}
	}
	if evs[1].Code != idemkit.CodeInvalidArgument {
		t.Fatalf("invalid-key event code %v", evs[1].Code)
	}
}
