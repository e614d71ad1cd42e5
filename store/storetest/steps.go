package storetest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// stepCases check [store.Stepper], on stores that implement it.
var stepCases = []struct {
	name string
	run  func(t *testing.T, e *Env, s store.Stepper)
}{
	{"StepsAreRecordedInOrder", testStepsInOrder},
	{"StepsCarryOverToTheNextHolder", testStepsTakeOver},
	{"StepsSurviveARelease", testStepsRelease},
	{"StepsOfAnotherFingerprintAreNotCarried", testStepsOtherFingerprint},
	{"StepsEndWithTheOutcomeOrADelete", testStepsEnd},
	{"StepsOfAnyBytes", testStepsBytes},
	{"StepsOfAStaleHolderAreRefused", testStepsStale},
	{"StepsKeptForTheirKeep", testStepsKeep},
	{"ConcurrentStepsOneLands", testStepsConcurrent},
	{"StepArgumentsCheckedBeforeIO", testStepsInvalid},
	{"StepRoundTrips", testStepsRoundTrips},
}

// stepCase wraps a step case for storeCases: it skips, naming why, a store
// that does not record steps.
func stepCase(run func(t *testing.T, e *Env, s store.Stepper)) func(t *testing.T, e *Env) {
	return func(t *testing.T, e *Env) {
		s, ok := e.Store.(store.Stepper)
		if !ok {
			t.Skipf("%T records no steps (it is not a store.Stepper)", e.Store)
		}
		run(t, e, s)
	}
}

func init() {
	for _, c := range stepCases {
		storeCases = append(storeCases, struct {
			name string
			run  func(t *testing.T, e *Env)
		}{c.name, stepCase(c.run)})
	}
}

func recordStep(t *testing.T, s store.Stepper, c store.Record, index int, name, result string, keep time.Duration) bool {
	t.Helper()
	ok, err := s.RecordStep(t.Context(), c.Key, c.Fence, index, store.Step{Name: name, Result: []byte(result)}, keep)
	if err != nil {
		t.Fatalf("RecordStep %d %q: unexpected error: %v", index, name, err)
	}
	return ok
}

// wantSteps fails unless got are the steps want, in order (name=result).
func wantSteps(t *testing.T, what string, got []store.Step, want ...string) {
	t.Helper()
	var g []string
	for _, s := range got {
		g = append(g, s.Name+"="+string(s.Result))
	}
	if strings.Join(g, ",") != strings.Join(want, ",") || len(g) != len(want) {
		t.Fatalf("%s: steps %q; want %q", what, g, want)
	}
}

func testStepsInOrder(t *testing.T, e *Env, s store.Stepper) {
	k := key(t, "steps")
	c := mustClaim(t, e, k, longTTL)
	wantSteps(t, "a new claim", c.Steps)
	if !recordStep(t, s, c, 0, "reserve", "r-1", longTTL) {
		t.Fatal("step 0 of the live claim was refused")
	}
	if recordStep(t, s, c, 0, "reserve", "r-2", longTTL) {
		t.Fatal("step 0 was recorded twice")
	}
	if recordStep(t, s, c, 2, "email", "", longTTL) {
		t.Fatal("step 2 was recorded before step 1")
	}
	if !recordStep(t, s, c, 1, "charge", "ch_1", longTTL) {
		t.Fatal("step 1 was refused")
	}
	got, ok := get(t, e, k)
	if !ok {
		t.Fatal("the claim is gone after its steps")
	}
	wantSameClaim(t, e, "Get after two steps", got, c)
	wantSteps(t, "Get after two steps", got.Steps, "reserve=r-1", "charge=ch_1")
	if !extend(t, e, k, c.Fence, longTTL) {
		t.Fatal("Extend of the claim with steps was refused")
	}
	got, _ = get(t, e, k)
	wantSteps(t, "Get after Extend", got.Steps, "reserve=r-1", "charge=ch_1")
}

func testStepsTakeOver(t *testing.T, e *Env, s store.Stepper) {
	k := key(t, "steps-takeover")
	ttl := shortTTL(e)
	c := mustClaim(t, e, k, ttl)
	recordStep(t, s, c, 0, "reserve", "r-1", longTTL)
	recordStep(t, s, c, 1, "charge", "ch_1", longTTL)
	pass(e, ttl)
	n, claimed := claim(t, e, k, fp, longTTL)
	if !claimed {
		t.Fatalf("the claim whose lease ran out was not taken over: %+v", n)
	}
	if n.Fence <= c.Fence {
		t.Fatalf("take-over fence %v; want above %v", n.Fence, c.Fence)
	}
	wantSteps(t, "the take-over's claim", n.Steps, "reserve=r-1", "charge=ch_1")
	if !recordStep(t, s, n, 2, "email", "sent", longTTL) {
		t.Fatal("the new holder's step 2 was refused")
	}
	got, _ := get(t, e, k)
	wantSteps(t, "Get after the new holder's step", got.Steps, "reserve=r-1", "charge=ch_1", "email=sent")
	// The new holder completes: the outcome has no steps, and a replay
	// shows none.
	if !complete(t, e, outcome(n, "done"), longTTL) {
		t.Fatal("the new holder's completion was refused")
	}
	r, claimed := claim(t, e, k, fp, longTTL)
	if claimed || r.State != store.StateCompleted || len(r.Steps) != 0 {
		t.Fatalf("replay after the completion: %+v; want the outcome without steps", r)
	}
}

func testStepsRelease(t *testing.T, e *Env, s store.Stepper) {
	k := key(t, "steps-release")
	c := mustClaim(t, e, k, longTTL)
	recordStep(t, s, c, 0, "reserve", "r-1", longTTL)
	if !release(t, e, k, c.Fence) {
		t.Fatal("Release of the claim with steps was refused")
	}
	if r, ok := get(t, e, k); ok {
		t.Fatalf("Get after Release: %+v; want nothing", r)
	}
	n, claimed := claim(t, e, k, fp, longTTL)
	if !claimed || n.Fence <= c.Fence {
		t.Fatalf("claim after Release: %+v, claimed %v; want a new claim above fence %v", n, claimed, c.Fence)
	}
	wantSteps(t, "the claim after a release", n.Steps, "reserve=r-1")
	if recordStep(t, s, c, 1, "charge", "x", longTTL) {
		t.Fatal("the released holder recorded a step")
	}
	// Released again without a new step, the steps are still there.
	if !release(t, e, k, n.Fence) {
		t.Fatal("second Release refused")
	}
	m, _ := claim(t, e, k, fp, longTTL)
	wantSteps(t, "the claim after a second release", m.Steps, "reserve=r-1")
}

func testStepsOtherFingerprint(t *testing.T, e *Env, s store.Stepper) {
	for _, end := range []string{"release", "lease"} {
		k := key(t, "steps-fp-"+end)
		ttl := longTTL
		if end == "lease" {
			ttl = shortTTL(e)
		}
		c := mustClaim(t, e, k, ttl)
		recordStep(t, s, c, 0, "reserve", "r-1", longTTL)
		if end == "release" {
			release(t, e, k, c.Fence)
		} else {
			pass(e, ttl)
		}
		n, claimed := claim(t, e, k, otherFP, longTTL)
		if !claimed {
			t.Fatalf("%s: another fingerprint's claim was refused: %+v", end, n)
		}
		wantSteps(t, end+": a claim of another fingerprint", n.Steps)
		// Nor do the steps come back once that claim ends.
		release(t, e, k, n.Fence)
		m, _ := claim(t, e, k, fp, longTTL)
		wantSteps(t, end+": the first fingerprint after another's claim", m.Steps)
	}
}

func testStepsEnd(t *testing.T, e *Env, s store.Stepper) {
	// A completion ends the steps: once the outcome expires, a new claim
	// of the same fingerprint starts afresh.
	k := key(t, "steps-complete")
	c := mustClaim(t, e, k, longTTL)
	recordStep(t, s, c, 0, "reserve", "r-1", longTTL)
	ttl := shortTTL(e)
	if !complete(t, e, outcome(c, "done"), ttl) {
		t.Fatal("completion of the claim with steps refused")
	}
	got, ok := get(t, e, k)
	if !ok || got.State != store.StateCompleted || len(got.Steps) != 0 {
		t.Fatalf("Get of the outcome: %+v; want it without steps", got)
	}
	if recordStep(t, s, c, 1, "charge", "x", longTTL) {
		t.Fatal("a step was recorded on an outcome")
	}
	pass(e, ttl)
	n, claimed := claim(t, e, k, fp, longTTL)
	if !claimed {
		t.Fatalf("claim after the outcome expired: %+v", n)
	}
	wantSteps(t, "the claim after an outcome", n.Steps)

	// A deletion removes them.
	k = key(t, "steps-delete")
	c = mustClaim(t, e, k, longTTL)
	recordStep(t, s, c, 0, "reserve", "r-1", longTTL)
	if !del(t, e, k) {
		t.Fatal("Delete of the claim with steps found nothing")
	}
	if recordStep(t, s, c, 1, "charge", "x", longTTL) {
		t.Fatal("a step was recorded on a deleted claim")
	}
	n, _ = claim(t, e, k, fp, longTTL)
	wantSteps(t, "the claim after a delete", n.Steps)

	// A deletion removes the steps a release left too (it may report
	// that nothing live was there): an operator drops steps that no
	// longer fit the work's code.
	k = key(t, "steps-delete-released")
	c = mustClaim(t, e, k, longTTL)
	recordStep(t, s, c, 0, "reserve", "r-1", longTTL)
	release(t, e, k, c.Fence)
	del(t, e, k)
	n, claimed = claim(t, e, k, fp, longTTL)
	if !claimed || n.Fence <= c.Fence {
		t.Fatalf("claim after deleting a released claim: %+v, %v", n, claimed)
	}
	wantSteps(t, "the claim after deleting a released claim", n.Steps)
}

func testStepsBytes(t *testing.T, e *Env, s store.Stepper) {
	k := key(t, "steps-bytes")
	c := mustClaim(t, e, k, longTTL)
	names := []string{"a", "r:1|2", "é☃ step", strings.Repeat("n", store.MaxStepNameBytes), "\x00x"}
	results := [][]byte{nil, {0, 0xff, ':', '|', '\n'}, []byte("{\"id\":1}"), bytes.Repeat([]byte{0xfe}, 1000), []byte(" ")}
	total := 0
	for i := range names {
		total += len(names[i]) + len(results[i])
	}
	// The last step fills what is left of MaxStepBytes but for the room
	// a decorator may take (a sealed store's envelopes: under 128 bytes a
	// step).
	big := store.Step{Name: "big", Result: bytes.Repeat([]byte{7}, store.MaxStepBytes-total-3-128*(len(names)+1))}
	for i := range names {
		ok, err := s.RecordStep(t.Context(), k, c.Fence, i, store.Step{Name: names[i], Result: results[i]}, longTTL)
		if err != nil || !ok {
			t.Fatalf("step %d (%q): %v, %v", i, names[i], ok, err)
		}
	}
	if ok, err := s.RecordStep(t.Context(), k, c.Fence, len(names), big, longTTL); err != nil || !ok {
		t.Fatalf("a step that fills MaxStepBytes: %v, %v", ok, err)
	}
	check := func(what string, got []store.Step) {
		t.Helper()
		if len(got) != len(names)+1 {
			t.Fatalf("%s: %d steps; want %d", what, len(got), len(names)+1)
		}
		for i := range names {
			if got[i].Name != names[i] || !bytes.Equal(got[i].Result, results[i]) {
				t.Fatalf("%s: step %d is %q=%q; want %q=%q", what, i, got[i].Name, got[i].Result, names[i], results[i])
			}
		}
		if got[len(names)].Name != "big" || !bytes.Equal(got[len(names)].Result, big.Result) {
			t.Fatalf("%s: the large step came back changed", what)
		}
	}
	got, _ := get(t, e, k)
	check("Get", got.Steps)
	release(t, e, k, c.Fence)
	n, _ := claim(t, e, k, fp, longTTL)
	check("the claim after a release", n.Steps)
	// What a caller does with the steps it got back does not reach the
	// store.
	if len(n.Steps[1].Result) > 0 {
		n.Steps[1].Result[0] = 'X'
	}
	got, _ = get(t, e, k)
	check("Get after the caller changed its copy", got.Steps)
}

func testStepsStale(t *testing.T, e *Env, s store.Stepper) {
	k := key(t, "steps-stale")
	ttl := shortTTL(e)
	c := mustClaim(t, e, k, ttl)
	recordStep(t, s, c, 0, "reserve", "r-1", longTTL)
	pass(e, ttl)
	// Run out but not taken over: the holder still records, as it would
	// still complete.
	if !recordStep(t, s, c, 1, "charge", "ch_1", longTTL) {
		t.Fatal("the step of a claim whose lease ran out, not taken over, was refused")
	}
	n, claimed := claim(t, e, k, fp, longTTL)
	if !claimed {
		t.Fatal("take-over refused")
	}
	wantSteps(t, "the take-over", n.Steps, "reserve=r-1", "charge=ch_1")
	if recordStep(t, s, c, 2, "email", "old", longTTL) {
		t.Fatal("the stale holder recorded a step after the take-over")
	}
	if recordStep(t, s, store.Record{Key: k, Fence: n.Fence + 1}, 2, "email", "x", longTTL) {
		t.Fatal("a step under a fence above the holder's was recorded")
	}
	got, _ := get(t, e, k)
	wantSteps(t, "Get after the stale holder's step", got.Steps, "reserve=r-1", "charge=ch_1")
}

func testStepsKeep(t *testing.T, e *Env, s store.Stepper) {
	if e.Advance == nil {
		t.Skip("needs an injected clock: the keep outlives the claim retention of one minute")
	}
	k := key(t, "steps-keep")
	lease := 10 * time.Second
	c := mustClaim(t, e, k, lease)
	keep := store.ClaimRetention + 10*time.Minute
	recordStep(t, s, c, 0, "reserve", "r-1", keep)
	// The holder crashed: past its lease and the claim retention, the
	// steps are still there for the retry.
	e.Advance(lease + store.ClaimRetention + 5*time.Minute)
	n, claimed := claim(t, e, k, fp, longTTL)
	if !claimed {
		t.Fatal("take-over refused")
	}
	wantSteps(t, "a claim within the steps' keep", n.Steps, "reserve=r-1")
	release(t, e, k, n.Fence)
	// A release keeps them for the keep too.
	e.Advance(5 * time.Minute)
	m, _ := claim(t, e, k, fp, lease)
	wantSteps(t, "a claim after a release, within the keep", m.Steps, "reserve=r-1")
	release(t, e, k, m.Fence)
	// Past every expiry they are gone (the fence rule still holds).
	e.Advance(keep + 2*longTTL)
	m2, _ := claim(t, e, k, fp, longTTL)
	wantSteps(t, "a claim past the steps' keep", m2.Steps)
	if m2.Fence <= m.Fence {
		t.Fatalf("fence %v after the steps expired; want above %v", m2.Fence, m.Fence)
	}
}

func testStepsConcurrent(t *testing.T, e *Env, s store.Stepper) {
	k := key(t, "steps-race")
	c := mustClaim(t, e, k, longTTL)
	const n = 16
	var wg sync.WaitGroup
	var landed atomic.Int32
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			ok, err := s.RecordStep(context.Background(), k, c.Fence, 0, store.Step{Name: "charge", Result: fmt.Appendf(nil, "%d", i)}, longTTL)
			if err != nil {
				errs <- err
			}
			if ok {
				landed.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("RecordStep: %v", err)
	}
	if landed.Load() != 1 {
		t.Fatalf("%d racing RecordStep of step 0 landed; want exactly 1", landed.Load())
	}
	got, _ := get(t, e, k)
	if len(got.Steps) != 1 || got.Steps[0].Name != "charge" {
		t.Fatalf("steps after the race: %+v; want one", got.Steps)
	}
}

func testStepsInvalid(t *testing.T, e *Env, s store.Stepper) {
	k := key(t, "steps-invalid")
	c := mustClaim(t, e, k, longTTL)
	ok := store.Step{Name: "charge"}
	for _, tc := range []struct {
		what  string
		key   string
		fence idemkit.Fence
		index int
		step  store.Step
		keep  time.Duration
	}{
		{"an empty key", "", c.Fence, 0, ok, longTTL},
		{"fence zero", k, 0, 0, ok, longTTL},
		{"a negative index", k, c.Fence, -1, ok, longTTL},
		{"index MaxSteps", k, c.Fence, store.MaxSteps, ok, longTTL},
		{"an empty name", k, c.Fence, 0, store.Step{}, longTTL},
		{"a name over MaxStepNameBytes", k, c.Fence, 0, store.Step{Name: strings.Repeat("n", store.MaxStepNameBytes+1)}, longTTL},
		{"a name not UTF-8", k, c.Fence, 0, store.Step{Name: "\xff"}, longTTL},
		{"a step over MaxStepBytes", k, c.Fence, 0, store.Step{Name: "n", Result: make([]byte, store.MaxStepBytes)}, longTTL},
		{"a keep under a millisecond", k, c.Fence, 0, ok, time.Microsecond},
	} {
		before := 0
		if e.RoundTrips != nil {
			before = e.RoundTrips()
		}
		done, err := s.RecordStep(t.Context(), tc.key, tc.fence, tc.index, tc.step, tc.keep)
		wantCode(t, "RecordStep with "+tc.what, err, idemkit.CodeInvalidArgument)
		if done {
			t.Fatalf("RecordStep with %s reported ok", tc.what)
		}
		if e.RoundTrips != nil && e.RoundTrips() != before {
			t.Fatalf("RecordStep with %s made a round trip", tc.what)
		}
	}
	got, _ := get(t, e, k)
	wantSteps(t, "after the refused steps", got.Steps)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.RecordStep(ctx, k, c.Fence, 0, ok, longTTL); err == nil {
		t.Fatal("RecordStep with an ended ctx succeeded")
	}
}

func testStepsRoundTrips(t *testing.T, e *Env, s store.Stepper) {
	if e.RoundTrips == nil {
		t.Skip("the Env counts no round trips")
	}
	k := key(t, "steps-trips")
	c := mustClaim(t, e, k, longTTL)
	before := e.RoundTrips()
	recordStep(t, s, c, 0, "reserve", "r-1", longTTL)
	if d := e.RoundTrips() - before; d != 1 {
		t.Fatalf("RecordStep cost %d round trips; want 1", d)
	}
}
