package guardtest

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/middleware"
)

// Race describes the race that [ExactlyOnce] runs. Its zero value is a
// race of 16 callers, 10 rounds, in which every duplicate must be
// replayed.
type Race struct {
	// Callers is how many goroutines call Execute in each round, all
	// released at once; caller i uses guard i modulo the number of guards.
	// Default: 16.
	Callers int
	// Rounds is how many races run, one after the other, each on a fresh
	// key. Default: 10.
	Rounds int
	// KeyPrefix names the keys: round i uses KeyPrefix followed by i.
	// Default: "guardtest/", a random lock id and "/", new for every call,
	// so that records kept from earlier runs never meet the race.
	KeyPrefix string
	// Fingerprint is the request's fingerprint, the same for every caller.
	// Default: an HTTP fingerprint of POST /guardtest.
	Fingerprint fingerprint.Fingerprint
	// InProgressOK accepts [middleware.ErrInProgress] as a caller's answer,
	// for guards whose wait budget may run out before the record appears;
	// such answers are counted. Default: false, every duplicate must get a
	// replay.
	InProgressOK bool
	// MaxWork is how long the work may take: each execution sleeps a
	// random duration from 0 to MaxWork before it answers. Default: 0, it
	// answers at once.
	MaxWork time.Duration
}

// Stats counts, over all rounds of a race, what the work and the callers
// did.
type Stats struct {
	Rounds     int // rounds run
	Executions int // executions of the work: one a round
	Replays    int // callers that got a replay, the checks after each round left out
	InProgress int // callers told the request was in progress (only with InProgressOK)
}

// ExactlyOnce races r.Callers goroutines over guards on one key, r.Rounds
// times with a fresh key each time, and fails the test (t.Fatal) unless,
// in every round:
//
//   - the work ran exactly once;
//   - the caller that ran it got its response, reported recorded;
//   - every other caller got a replay of that response, or, with
//     r.InProgressOK, [middleware.ErrInProgress]; no caller got any other
//     error;
//   - after the race, every guard replays the response without running
//     the work again.
//
// The work answers a value of its own for each round. Calls run on
// t.Context(). ExactlyOnce must be called from the test's goroutine; it
// returns what it counted.
func ExactlyOnce(t testing.TB, guards []*middleware.Guard, r Race) Stats {
	t.Helper()
	if len(guards) == 0 {
		t.Fatal("guardtest: no guards")
	}
	for i, g := range guards {
		if g == nil {
			t.Fatalf("guardtest: guard %d is nil", i)
		}
	}
	if r.Callers <= 0 {
		r.Callers = 16
	}
	if r.Rounds <= 0 {
		r.Rounds = 10
	}
	if r.KeyPrefix == "" {
		r.KeyPrefix = "guardtest/" + crand.Text() + "/"
	}
	if r.Fingerprint.IsZero() {
		r.Fingerprint = fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/guardtest"})
	}
	var st Stats
	for round := range r.Rounds {
		replays, inProgress := r.round(t, guards, round)
		st.Rounds++
		st.Executions++
		st.Replays += replays
		st.InProgress += inProgress
	}
	t.Logf("guardtest: exactly once in %d rounds of %d callers over %d guards (%d replays, %d in progress)",
		st.Rounds, r.Callers, len(guards), st.Replays, st.InProgress)
	return st
}

// round runs one race on a fresh key and checks it; it returns how many
// callers got a replay and how many were told the request is in progress.
func (r Race) round(t testing.TB, guards []*middleware.Guard, round int) (replays, inProgress int) {
	t.Helper()
	ctx := t.Context()
	key := fmt.Sprint(r.KeyPrefix, round)
	want := "response of " + key
	var executions, replayed, busy atomic.Int32
	work := func(context.Context) (middleware.Result, error) {
		executions.Add(1)
		if r.MaxWork > 0 {
			time.Sleep(rand.N(r.MaxWork + 1))
		}
		return middleware.Result{Value: []byte(want)}, nil
	}
	errs := make(chan error, r.Callers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range r.Callers {
		wg.Go(func() {
			<-start
			g := i % len(guards)
			out, err := guards[g].Execute(ctx, key, r.Fingerprint, work)
			switch {
			case r.InProgressOK && errors.Is(err, middleware.ErrInProgress):
				busy.Add(1)
			case err != nil:
				errs <- fmt.Errorf("caller %d (guard %d): %w", i, g, err)
			case string(out.Value) != want:
				errs <- fmt.Errorf("caller %d (guard %d): response %q; want %q", i, g, out.Value, want)
			case out.Replayed:
				replayed.Add(1)
			case !out.Recorded:
				errs <- fmt.Errorf("caller %d (guard %d): the execution was not recorded", i, g)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("round %d: %v", round, err)
	}
	if n := executions.Load(); n != 1 {
		t.Fatalf("round %d: the work ran %d times; want exactly once", round, n)
	}
	if got := 1 + replayed.Load() + busy.Load(); int(got) != r.Callers {
		t.Fatalf("round %d: %d answers (1 execution, %d replays, %d in progress) for %d callers", round, got, replayed.Load(), busy.Load(), r.Callers)
	}
	for g, guard := range guards {
		out, err := guard.Execute(ctx, key, r.Fingerprint, work)
		if err != nil || !out.Replayed || string(out.Value) != want {
			t.Fatalf("round %d: guard %d after the race: %+v, %v; want a replay of %q", round, g, out, err, want)
		}
	}
	if n := executions.Load(); n != 1 {
		t.Fatalf("round %d: the work ran again after the race", round)
	}
	return int(replayed.Load()), int(busy.Load())
}
