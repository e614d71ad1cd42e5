package guardtest_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

// newGuard builds a guard on s and l, failing the test on an error.
func newGuard(t *testing.T, s *memstore.Store, opts ...middleware.Option) *middleware.Guard {
	t.Helper()
	g, err := middleware.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestExactlyOnce races guards that share one store and one locker: the
// race passes, and its counts add up.
func TestExactlyOnce(t *testing.T) {
	for _, c := range []struct {
		name            string
		race            guardtest.Race
		guard           []middleware.Option
		callers, rounds int // the race's, defaults applied
	}{
		{"defaults", guardtest.Race{}, []middleware.Option{middleware.WithWaitBudget(time.Minute)}, 16, 10},
		{"slow work", guardtest.Race{Callers: 8, Rounds: 5, MaxWork: 2 * time.Millisecond, KeyPrefix: "slow-"},
			[]middleware.Option{middleware.WithWaitBudget(time.Minute)}, 8, 5},
		{"in progress allowed", guardtest.Race{Callers: 8, Rounds: 5, MaxWork: time.Millisecond, InProgressOK: true},
			[]middleware.Option{middleware.WithWaitBudget(0)}, 8, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := memstore.New()
			guards := make([]*middleware.Guard, 3)
			for i := range guards {
				guards[i] = newGuard(t, s, c.guard...)
			}
			st := guardtest.ExactlyOnce(t, guards, c.race)
			if st.Rounds != c.rounds || st.Executions != c.rounds || st.Replays+st.InProgress != c.rounds*(c.callers-1) {
				t.Fatalf("stats %+v; want %d rounds of %d callers", st, c.rounds, c.callers)
			}
			if !c.race.InProgressOK && st.InProgress != 0 {
				t.Fatalf("stats %+v: in-progress answers counted without InProgressOK", st)
			}
		})
	}
}

// recorder stands in for the test, to see ExactlyOnce fail: Fatal and
// Fatalf record the message and end the goroutine, as testing's do.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed []string
}

func (r *recorder) Fatal(args ...any) {
	r.fail(fmt.Sprint(args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.fail(fmt.Sprintf(format, args...))
}

func (r *recorder) fail(msg string) {
	r.mu.Lock()
	r.failed = append(r.failed, msg)
	r.mu.Unlock()
	runtime.Goexit()
}

// run calls ExactlyOnce on a recorder, in a goroutine of its own (Fatal
// ends it), and returns the failures it recorded.
func run(t *testing.T, guards []*middleware.Guard, race guardtest.Race) []string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		guardtest.ExactlyOnce(r, guards, race)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// TestExactlyOnceFails checks that a broken deployment fails the race:
// guards that share nothing each run the work once, so it runs as many
// times as there are guards, with InProgressOK or without; and the race
// refuses to start without guards.
func TestExactlyOnceFails(t *testing.T) {
	apart := []*middleware.Guard{
		newGuard(t, memstore.New()),
		newGuard(t, memstore.New()),
	}
	for _, c := range []struct {
		name   string
		guards []*middleware.Guard
		race   guardtest.Race
		want   string
	}{
		{"no guards", nil, guardtest.Race{}, "no guards"},
		{"a nil guard", []*middleware.Guard{apart[0], nil}, guardtest.Race{}, "guard 1 is nil"},
		{"guards that share nothing", apart, guardtest.Race{Callers: 4, Rounds: 1}, "the work ran 2 times"},
		{"guards that share nothing, in progress allowed", apart, guardtest.Race{Callers: 4, Rounds: 1, InProgressOK: true}, "the work ran 2 times"},
	} {
		t.Run(c.name, func(t *testing.T) {
			failed := run(t, c.guards, c.race)
			if len(failed) != 1 || !strings.Contains(failed[0], c.want) {
				t.Fatalf("failures %q; want one that says %q", failed, c.want)
			}
		})
	}
}
