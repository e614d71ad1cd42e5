package sweepertest

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// guard bounds every wait: a sweeper that has not done its work by then
// is taken to hang.
const guard = time.Minute

// poll is how often a wait looks again.
const poll = 20 * time.Millisecond

// Logs collects log output; it is safe for concurrent use, and its zero
// value is ready.
type Logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the collected output.
func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything written so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Logger returns a logger that writes text lines (slog.TextHandler, info
// level and above) to l.
func (l *Logs) Logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// Await waits until the collected output contains s, and fails the test
// with the output if it has not within a minute.
func (l *Logs) Await(t testing.TB, s string) {
	t.Helper()
	for deadline := time.Now().Add(guard); !strings.Contains(l.String(), s); time.Sleep(poll) {
		if time.Now().After(deadline) {
			t.Fatalf("%q was not logged within %v; the log:\n%s", s, guard, l.String())
		}
	}
}

// Sweeper is the sweeper under test, with an expired record left for it
// to collect.
type Sweeper struct {
	// Start starts the sweeper with the given interval: a StartSweeper
	// method.
	Start func(ctx context.Context, interval time.Duration) (stop func())
	// Interval is the interval passed to Start. Default: 50 ms.
	Interval time.Duration
	// Collected reports whether the expired record is gone.
	Collected func(ctx context.Context) (bool, error)
	// Break, when not nil, closes the sweeper's client so that every later
	// sweep fails with ServiceUnavailable; Run then checks that the
	// failure is logged. Nil skips that part.
	Break func()
	// Logs is where the sweeper logs (needed with Break).
	Logs *Logs
	// Message is the message the sweeper logs its failures with.
	Message string
	// Secret is the key of the expired record: no log line may hold it.
	Secret string
}

// Run starts the sweeper and waits until it collects the expired record.
// With Break set, it then breaks the sweeper's client, waits for a failure
// logged with code ServiceUnavailable (an earlier sweep may also have
// failed otherwise, timed out on a busy machine), and checks that the log
// holds Message and not Secret. Last it calls stop twice. Every wait fails
// the test after a minute.
func Run(t testing.TB, s Sweeper) {
	t.Helper()
	if s.Start == nil || s.Collected == nil || (s.Break != nil && s.Logs == nil) {
		t.Fatal("sweepertest: Start and Collected are required, and Logs with Break")
	}
	interval := s.Interval
	if interval <= 0 {
		interval = 50 * time.Millisecond
	}
	ctx := t.Context()
	stop := s.Start(ctx, interval)
	defer stop()
	for deadline := time.Now().Add(guard); ; time.Sleep(poll) {
		gone, err := s.Collected(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sweeper did not collect an expired record within %v", guard)
		}
	}
	if s.Break != nil {
		s.Break()
		s.Logs.Await(t, "code="+idemkit.CodeServiceUnavailable.String())
	}
	stop()
	stop() // idempotent
	if s.Logs == nil {
		return
	}
	if l := s.Logs.String(); (s.Secret != "" && strings.Contains(l, s.Secret)) || (s.Break != nil && !strings.Contains(l, s.Message)) {
		t.Fatalf("sweeper log (want %q, never the key):\n%s", s.Message, l)
	}
}
