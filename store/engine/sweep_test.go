package engine_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/sweepertest"
	"github.com/idemkit/idemkit/store/engine"
)

// hang bounds every wait of these tests: a sweeper that has not done its
// work by then is taken to hang.
const hang = time.Minute

// receive waits for a value on c, failing the test after a minute.
func receive[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(hang):
		t.Fatalf("%s: nothing within %v", what, hang)
		panic("unreachable")
	}
}

// TestSweepEvery runs a fake sweep on a real short interval: it is called
// again and again, each call with a deadline, its failures are logged with
// their code and count (its successes are not), and stop ends it and may
// be called again.
func TestSweepEvery(t *testing.T) {
	var logs sweepertest.Logs
	type call struct{ deadline, ok bool }
	calls := make(chan call, 1)
	var n atomic.Int32
	sweep := func(ctx context.Context) (int, error) {
		i := n.Add(1)
		_, ok := ctx.Deadline()
		select {
		case calls <- call{deadline: ok}:
		default:
		}
		if i == 2 {
			return 7, idemkit.NewError(idemkit.CodeServiceUnavailable, "sweep", "the server is gone", nil)
		}
		return 1, nil
	}
	stop := engine.SweepEvery(t.Context(), time.Millisecond, sweep, logs.Logger(), "test: sweeping failed")
	for range 4 { // more calls than the one that fails
		if c := receive(t, calls, "a sweep"); !c.deadline {
			t.Fatal("a sweep's ctx has no deadline; want one bounded by the interval")
		}
	}
	stop()
	stop() // idempotent
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("log: %q; want one line, for the one failure", lines)
	}
	for _, want := range []string{"level=WARN", `msg="test: sweeping failed"`, "deleted=7", "code=ServiceUnavailable", "the server is gone"} {
		if !strings.Contains(lines[0], want) {
			t.Fatalf("log line %q lacks %q", lines[0], want)
		}
	}
}

// TestSweepEveryStopWaits checks that stop returns only after the sweep in
// progress has returned, and that a failure coming after the sweeper's ctx
// ended is not logged.
func TestSweepEveryStopWaits(t *testing.T) {
	var logs sweepertest.Logs
	entered, proceed := make(chan struct{}), make(chan struct{})
	var returned atomic.Bool
	var n atomic.Int32
	sweep := func(ctx context.Context) (int, error) {
		if n.Add(1) == 1 {
			close(entered)
			<-proceed // ignores ctx, as a slow sweep may
			returned.Store(true)
		}
		return 0, idemkit.NewError(idemkit.CodeAborted, "sweep", "context canceled", context.Canceled)
	}
	ctx, cancel := context.WithCancel(t.Context())
	stop := engine.SweepEvery(ctx, time.Millisecond, sweep, logs.Logger(), "test: sweeping failed")
	receive(t, entered, "the first sweep")
	cancel() // the sweep in progress now fails after the sweeper's ctx ended
	stopped := make(chan bool)
	go func() {
		stop()
		stopped <- returned.Load()
	}()
	// A correct stop cannot return before proceed is closed; the pause
	// only gives a wrong one the chance to show itself (it never fails a
	// correct one, however slow the machine).
	select {
	case <-stopped:
		t.Fatal("stop returned while a sweep was in progress")
	case <-time.After(50 * time.Millisecond):
	}
	close(proceed)
	if !receive(t, stopped, "stop") {
		t.Fatal("stop returned before the sweep in progress")
	}
	stop() // idempotent, also after the ctx ended
	if l := logs.String(); l != "" {
		t.Fatalf("log: %s; want nothing (the failure came after the ctx ended)", l)
	}
}

// TestSweepEveryNil checks that a nil sweep starts nothing and that its
// stop may be called.
func TestSweepEveryNil(t *testing.T) {
	stop := engine.SweepEvery(t.Context(), time.Millisecond, nil, nil, "unused")
	stop()
	stop()
}
