package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// stepStore is one process's client of a shared memstore: it counts the
// calls it makes and, once dead, fails every write (the process crashed,
// or lost its network, and its claim is left to run out).
type stepStore struct {
	*memstore.Store
	claims, completes, completed, steps, releases, gets atomic.Int32
	dead                                                atomic.Bool
}

func newStepStore(s *memstore.Store) *stepStore { return &stepStore{Store: s} }

var errDead = idemkit.NewError(idemkit.CodeServiceUnavailable, "test", "injected: the process is gone", nil)

func (s *stepStore) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	s.claims.Add(1)
	if s.dead.Load() {
		return store.Record{}, false, errDead
	}
	return s.Store.Claim(ctx, key, fp, ttl)
}

func (s *stepStore) Get(ctx context.Context, key string) (store.Record, bool, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, key)
}

func (s *stepStore) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	if s.dead.Load() {
		return time.Time{}, false, errDead
	}
	return s.Store.Extend(ctx, key, fence, ttl)
}

func (s *stepStore) Complete(ctx context.Context, r store.Record, ttl time.Duration) (bool, error) {
	s.completes.Add(1)
	if s.dead.Load() {
		return false, errDead
	}
	ok, err := s.Store.Complete(ctx, r, ttl)
	if ok {
		s.completed.Add(1)
	}
	return ok, err
}

func (s *stepStore) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	s.releases.Add(1)
	if s.dead.Load() {
		return false, errDead
	}
	return s.Store.Release(ctx, key, fence)
}

func (s *stepStore) RecordStep(ctx context.Context, key string, fence idemkit.Fence, index int, step store.Step, keep time.Duration) (bool, error) {
	s.steps.Add(1)
	if s.dead.Load() {
		return false, errDead
	}
	return s.Store.RecordStep(ctx, key, fence, index, step, keep)
}

var quiet = middleware.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))

// stepNames are the steps of the three-step work of these tests.
var stepNames = []string{"reserve", "charge", "email"}

// TestStepsRunOnceAcrossCrashes races four workers, each a process of its
// own (its own client and guard, made anew for each attempt), on every
// key, with three-step work cut at random points: a process that crashes
// between two steps (every later write of it fails, its claim is left to
// run out) or that stalls (its lease runs out while its work waits; its
// next step is refused). Each retries until it gets the outcome. Every
// step runs exactly once per key, one outcome is recorded per key, and
// every worker gets the same response.
func TestStepsRunOnceAcrossCrashes(t *testing.T) {
	const keys, workers = 12, 4
	shared := memstore.New()
	type keyState struct {
		execs     [3]atomic.Int32
		completed atomic.Int32
		mu        sync.Mutex
		responses []string
	}
	state := make([]*keyState, keys)
	for i := range state {
		state[i] = new(keyState)
	}
	var crashes, stalls, resumed atomic.Int32
	var wg sync.WaitGroup
	for k := range keys {
		for w := range workers {
			wg.Go(func() {
				ks := state[k]
				key := fmt.Sprint("order-", k)
				rng := rand.New(rand.NewPCG(uint64(k), uint64(w)))
				cuts := 3 // the runs of this worker still to cut
				for attempt := 0; ; attempt++ {
					if attempt > 200 {
						t.Errorf("%s: worker %d got no outcome in %d attempts", key, w, attempt)
						return
					}
					proc := newStepStore(shared)
					var replays atomic.Int32
					g := newGuard(t, proc, quiet, fastBackoff,
						middleware.WithLeaseTTL(30*time.Millisecond), middleware.WithWaitBudget(20*time.Millisecond),
						middleware.WithRecordWriteTimeout(50*time.Millisecond),
						middleware.WithHook(middleware.HookFunc(func(_ context.Context, e middleware.Event) {
							if e.Kind == middleware.EventStepReplayed {
								replays.Add(1)
							}
						})))
					// Cut the worker's first runs at a random point:
					// after step cut-1 was recorded (0: before the
					// first).
					cut, mode := 3, rng.IntN(3)
					if cuts > 0 && mode != 0 {
						cut = rng.IntN(3)
					}
					out, err := g.Execute(t.Context(), key, fpA, func(ctx context.Context) (middleware.Result, error) {
						var parts []string
						for i, name := range stepNames {
							if i == cut {
								cuts--
								if mode == 1 {
									// Crash: nothing of this process writes again.
									crashes.Add(1)
									proc.dead.Store(true)
									return middleware.Result{}, errors.New("crashed")
								}
								// Stall: the process cannot reach the
								// backend while its work waits; its lease
								// runs out, and its next step is refused.
								stalls.Add(1)
								proc.dead.Store(true)
								<-ctx.Done()
								_, err := middleware.Step(ctx, name, func(context.Context) ([]byte, error) {
									ks.execs[i].Add(1)
									return []byte("late"), nil
								})
								if !errors.Is(err, idemkit.ErrLeaseLost) {
									t.Errorf("%s: a step after the lease ran out: %v; want ErrLeaseLost", key, err)
								}
								return middleware.Result{}, err
							}
							r, err := middleware.Step(ctx, name, func(context.Context) ([]byte, error) {
								ks.execs[i].Add(1)
								return fmt.Appendf(nil, "%s-%d-%d", name, w, attempt), nil
							})
							if err != nil {
								return middleware.Result{}, err
							}
							parts = append(parts, string(r))
						}
						return middleware.Result{Value: []byte(strings.Join(parts, ","))}, nil
					})
					ks.completed.Add(proc.completed.Load())
					if replays.Load() > 0 {
						resumed.Add(1)
					}
					if err == nil && (out.Recorded || out.Replayed) {
						ks.mu.Lock()
						ks.responses = append(ks.responses, string(out.Value))
						ks.mu.Unlock()
						return
					}
					time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
	for k, ks := range state {
		for i := range stepNames {
			if n := ks.execs[i].Load(); n != 1 {
				t.Errorf("order-%d: step %q ran %d times; want exactly once", k, stepNames[i], n)
			}
		}
		if n := ks.completed.Load(); n != 1 {
			t.Errorf("order-%d: %d outcomes recorded; want 1", k, n)
		}
		if len(ks.responses) != workers {
			t.Errorf("order-%d: %d workers got the outcome; want %d", k, len(ks.responses), workers)
			continue
		}
		for _, r := range ks.responses {
			if r != ks.responses[0] || strings.Count(r, ",") != 2 {
				t.Errorf("order-%d: responses %q; want one three-step response for all", k, ks.responses)
				break
			}
		}
		rec, ok, err := shared.Get(t.Context(), "idempotency::order-"+fmt.Sprint(k))
		if err != nil || !ok || rec.State != store.StateCompleted || string(rec.Response) != ks.responses[0] || len(rec.Steps) != 0 {
			t.Errorf("order-%d: record %+v, %v, %v; want the outcome, without steps", k, rec, ok, err)
		}
	}
	if crashes.Load() == 0 || stalls.Load() == 0 || resumed.Load() == 0 {
		t.Fatalf("%d crashes, %d stalls, %d resumed runs: the test cut no work, or none resumed", crashes.Load(), stalls.Load(), resumed.Load())
	}
	t.Logf("%d crashes, %d stalls, %d runs resumed from a recovery point", crashes.Load(), stalls.Load(), resumed.Load())
}

// TestStepAfterTheLeaseWasLostIsRefused: a holder's step outlasts its
// lease (it cannot reach the backend to extend it) and another guard takes
// the key over meanwhile. The old holder's recording is refused with an
// error matching ErrLeaseLost, its work's ctx ends with that cause, and it
// records no outcome; the new holder resumes after the last recorded step.
func TestStepAfterTheLeaseWasLostIsRefused(t *testing.T) {
	shared := memstore.New()
	old := &partitioned{stepStore: newStepStore(shared)}
	var evOld, evNew events
	gOld := newGuard(t, old, quiet, fastBackoff, middleware.WithLeaseTTL(30*time.Millisecond), middleware.WithHook(&evOld))
	gNew := newGuard(t, newStepStore(shared), quiet, fastBackoff, middleware.WithWaitBudget(5*time.Second), middleware.WithHook(&evNew))
	var execs [3]atomic.Int32
	newStarted, newDone := make(chan struct{}), make(chan struct{})
	var oldStepErr, oldCause error
	oldOut, oldErr := gOld.Execute(t.Context(), "k", fpA, func(ctx context.Context) (middleware.Result, error) {
		if _, err := middleware.Step(ctx, "reserve", func(context.Context) ([]byte, error) {
			execs[0].Add(1)
			return []byte("r-old"), nil
		}); err != nil {
			return middleware.Result{}, err
		}
		old.partition.Store(true) // its extensions fail from now on
		_, oldStepErr = middleware.Step(ctx, "charge", func(context.Context) ([]byte, error) {
			execs[1].Add(1)
			go func() {
				defer close(newDone)
				_, err := gNew.Execute(context.Background(), "k", fpA, func(ctx context.Context) (middleware.Result, error) {
					close(newStarted)
					var parts []string
					for i, name := range stepNames {
						r, err := middleware.Step(ctx, name, func(context.Context) ([]byte, error) {
							execs[i].Add(1)
							return []byte(name + "-new"), nil
						})
						if err != nil {
							return middleware.Result{}, err
						}
						parts = append(parts, string(r))
					}
					return middleware.Result{Value: []byte(strings.Join(parts, ","))}, nil
				})
				if err != nil {
					t.Errorf("the new holder: %v", err)
				}
			}()
			<-newStarted // slow: the key is taken over while it runs
			return []byte("ch-old"), nil
		})
		oldCause = context.Cause(ctx)
		return middleware.Result{Value: []byte("old")}, nil // it ignores the error: the guard still must not complete
	})
	if !errors.Is(oldStepErr, idemkit.ErrLeaseLost) || !errors.Is(oldStepErr, middleware.ErrUnavailable) {
		t.Fatalf("the old holder's step: %v; want ErrLeaseLost (unavailable)", oldStepErr)
	}
	if !errors.Is(oldCause, idemkit.ErrLeaseLost) {
		t.Fatalf("the old holder's ctx ended with %v; want ErrLeaseLost", oldCause)
	}
	if oldErr != nil || oldOut.Recorded || old.completes.Load() != 0 {
		t.Fatalf("the old holder: %+v, %v after %d completions; want its outcome not recorded, without a completion", oldOut, oldErr, old.completes.Load())
	}
	if evOld.count(middleware.EventNotRecorded) != 1 || evOld.count(middleware.EventLeaseLost) != 1 {
		t.Fatalf("the old holder's events %v; want one lease-lost and a not-recorded outcome", evOld.kinds())
	}
	<-newDone
	rec, ok, err := shared.Get(t.Context(), "idempotency::k")
	if err != nil || !ok || rec.State != store.StateCompleted {
		t.Fatalf("the record after the new holder: %+v, %v, %v; want its outcome", rec, ok, err)
	}
	if string(rec.Response) != "r-old,charge-new,email-new" {
		t.Fatalf("the outcome %q; want the old holder's recorded step, then the new holder's", rec.Response)
	}
	if execs[0].Load() != 1 || execs[1].Load() != 2 || execs[2].Load() != 1 {
		t.Fatalf("step executions %d, %d, %d; want 1 (recorded, then replayed), 2 (the old holder's was refused), 1",
			execs[0].Load(), execs[1].Load(), execs[2].Load())
	}
	var replayed []string
	for _, e := range evNew.list {
		if e.Kind == middleware.EventStepReplayed {
			replayed = append(replayed, fmt.Sprintf("%d:%s:%d", e.StepIndex, e.StepName, e.Size))
		}
	}
	if strings.Join(replayed, " ") != "0:reserve:5" {
		t.Fatalf("the new holder's replayed steps %q; want step 0 (reserve, 5 bytes)", replayed)
	}
}

// partitioned is a process's client whose extensions fail once partition
// is set, while its other calls go through.
type partitioned struct {
	*stepStore
	partition atomic.Bool
}

func (p *partitioned) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	if p.partition.Load() {
		return time.Time{}, false, errDead
	}
	return p.stepStore.Extend(ctx, key, fence, ttl)
}

// threeSteps is work of three steps that fails with failAfter after the
// step of that index (-1: never), counting each step's executions.
func threeSteps(execs *[3]atomic.Int32, failAfter int, failure error) middleware.Func {
	return func(ctx context.Context) (middleware.Result, error) {
		var parts []string
		for i, name := range stepNames {
			r, err := middleware.Step(ctx, name, func(context.Context) ([]byte, error) {
				n := execs[i].Add(1)
				return fmt.Appendf(nil, "%s#%d", name, n), nil
			})
			if err != nil {
				return middleware.Result{}, err
			}
			parts = append(parts, string(r))
			if i == failAfter {
				return middleware.Result{}, failure
			}
		}
		return middleware.Result{Value: []byte(strings.Join(parts, ","))}, nil
	}
}

// TestStepsSurviveAWorkError: work that fails after two steps releases its
// claim as any failed work does, but its steps stay: the retry resumes
// from them, reporting each replayed step to the hooks, and runs only the
// last step. The same holds after DoNotRecord.
func TestStepsSurviveAWorkError(t *testing.T) {
	for _, how := range []string{"error", "DoNotRecord"} {
		t.Run(how, func(t *testing.T) {
			var ev events
			s := newStepStore(memstore.New())
			g := newGuard(t, s, middleware.WithHook(&ev))
			var execs [3]atomic.Int32
			fail := errors.New("the mail server is down")
			first := threeSteps(&execs, 1, fail)
			if how == "DoNotRecord" {
				first = func(ctx context.Context) (middleware.Result, error) {
					_, _ = threeSteps(&execs, 1, nil)(ctx)
					middleware.DoNotRecord(ctx)
					return middleware.Result{Value: []byte("try again")}, nil
				}
			}
			_, err := g.Execute(t.Context(), "k", fpA, first)
			if how == "error" && !errors.Is(err, fail) {
				t.Fatalf("first run: %v; want the work's error", err)
			}
			if s.releases.Load() != 1 {
				t.Fatalf("%d releases after the failed run; want 1", s.releases.Load())
			}
			out, err := g.Execute(t.Context(), "k", fpA, threeSteps(&execs, -1, nil))
			if err != nil || string(out.Value) != "reserve#1,charge#1,email#1" || !out.Recorded {
				t.Fatalf("retry: %+v, %v; want reserve#1,charge#1,email#1 recorded", out, err)
			}
			if execs[0].Load() != 1 || execs[1].Load() != 1 || execs[2].Load() != 1 {
				t.Fatalf("step executions %d, %d, %d; want each once", execs[0].Load(), execs[1].Load(), execs[2].Load())
			}
			var got []string
			for _, e := range ev.list {
				if e.Kind == middleware.EventStepRecorded || e.Kind == middleware.EventStepReplayed {
					got = append(got, fmt.Sprintf("%s %d %s", e.Kind, e.StepIndex, e.StepName))
				}
			}
			want := "step-recorded 0 reserve|step-recorded 1 charge|step-replayed 0 reserve|step-replayed 1 charge|step-recorded 2 email"
			if strings.Join(got, "|") != want {
				t.Fatalf("step events %q; want %q", strings.Join(got, "|"), want)
			}
			// A replay of the outcome runs nothing and shows no steps.
			out, err = g.Execute(t.Context(), "k", fpA, threeSteps(&execs, -1, nil))
			if err != nil || !out.Replayed || string(out.Value) != "reserve#1,charge#1,email#1" {
				t.Fatalf("replay: %+v, %v", out, err)
			}
		})
	}
}

// TestStepFnErrorRecordsNothing: a step whose fn fails records nothing and
// returns fn's error as it is; the work may go on with another step in
// its place.
func TestStepFnErrorRecordsNothing(t *testing.T) {
	s := newStepStore(memstore.New())
	g := newGuard(t, s)
	fail := errors.New("declined")
	out, err := g.Execute(t.Context(), "k", fpA, func(ctx context.Context) (middleware.Result, error) {
		_, err := middleware.Step(ctx, "charge", func(context.Context) ([]byte, error) { return nil, fail })
		if err != fail {
			return middleware.Result{}, fmt.Errorf("step error %v; want fn's error as it is", err)
		}
		r, err := middleware.Step(ctx, "refund", func(context.Context) ([]byte, error) { return []byte("rf"), nil })
		return middleware.Result{Value: r}, err
	})
	if err != nil || string(out.Value) != "rf" || s.steps.Load() != 1 {
		t.Fatalf("%+v, %v, %d recordings; want rf and one recording (the failed step records nothing)", out, err, s.steps.Load())
	}
}

// TestStepNameMismatchNamesBoth: a retry whose work calls its steps by
// other names than those recorded (its code changed under a live key)
// fails with an error that names both, and runs nothing.
func TestStepNameMismatchNamesBoth(t *testing.T) {
	g := newGuard(t, memstore.New())
	var execs [3]atomic.Int32
	if _, err := g.Execute(t.Context(), "k", fpA, threeSteps(&execs, 1, errors.New("boom"))); err == nil {
		t.Fatal("the first run did not fail")
	}
	ran := false
	_, err := g.Execute(t.Context(), "k", fpA, func(ctx context.Context) (middleware.Result, error) {
		if _, err := middleware.Step(ctx, "reserve", func(context.Context) ([]byte, error) { ran = true; return nil, nil }); err != nil {
			return middleware.Result{}, err
		}
		_, err := middleware.Step(ctx, "capture", func(context.Context) ([]byte, error) { ran = true; return nil, nil })
		return middleware.Result{}, err
	})
	if !errors.Is(err, middleware.ErrStepMismatch) || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("err %v; want ErrStepMismatch, InvalidArgument", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `step 1 is "charge"`) || !strings.Contains(msg, `calls it "capture"`) {
		t.Fatalf("error %q; want it to name the recorded step and the work's", msg)
	}
	if ran {
		t.Fatal("a step ran on the mismatched run")
	}
}

// TestStepLimits: the step after store.MaxSteps and a name that no longer
// fits in store.MaxStepBytes are refused before fn runs; a result that
// takes the run's steps over store.MaxStepBytes is refused after it ran
// and is not recorded. All match store.ErrTooLarge, InvalidArgument.
func TestStepLimits(t *testing.T) {
	g := newGuard(t, newStepStore(memstore.New()))
	wantTooLarge := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrTooLarge) || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("%s: %v; want InvalidArgument matching store.ErrTooLarge", what, err)
		}
	}
	_, err := g.Execute(t.Context(), "count", fpA, func(ctx context.Context) (middleware.Result, error) {
		for i := range store.MaxSteps {
			if _, err := middleware.Step(ctx, fmt.Sprint("s", i), func(context.Context) ([]byte, error) { return []byte{1}, nil }); err != nil {
				return middleware.Result{}, fmt.Errorf("step %d: %w", i, err)
			}
		}
		ran := false
		_, err := middleware.Step(ctx, "one-too-many", func(context.Context) ([]byte, error) { ran = true; return nil, nil })
		wantTooLarge("the step after MaxSteps", err)
		if ran {
			t.Error("the step after MaxSteps ran")
		}
		return middleware.Result{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.Execute(t.Context(), "bytes", fpA, func(ctx context.Context) (middleware.Result, error) {
		ran := 0
		_, err := middleware.Step(ctx, "big", func(context.Context) ([]byte, error) {
			ran++
			return make([]byte, store.MaxStepBytes), nil
		})
		wantTooLarge("a result over MaxStepBytes", err)
		if ran != 1 {
			t.Errorf("the step with a large result ran %d times; want once (its size is known after)", ran)
		}
		fill := store.MaxStepBytes - len("fill") - 2
		if _, err := middleware.Step(ctx, "fill", func(context.Context) ([]byte, error) { return make([]byte, fill), nil }); err != nil {
			t.Errorf("a step that fits: %v", err)
		}
		_, err = middleware.Step(ctx, "abc", func(context.Context) ([]byte, error) { ran++; return nil, nil })
		wantTooLarge("a name that does not fit", err)
		if ran != 1 {
			t.Error("the step whose name does not fit ran")
		}
		r, err := middleware.Step(ctx, "ab", func(context.Context) ([]byte, error) { return nil, nil })
		if err != nil || r != nil {
			t.Errorf("a step that exactly fills MaxStepBytes: %q, %v", r, err)
		}
		in, _, _ := g.Inspect(ctx, "", "bytes", false)
		if len(in.Steps) != 2 || in.Steps[0].Name != "fill" || in.Steps[0].Size != fill || in.Steps[1].Name != "ab" {
			t.Errorf("recorded steps %+v; want fill and ab", in.Steps)
		}
		return middleware.Result{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// hiddenStepper is a store that records no steps.
type hiddenStepper struct{ store.Store }

// TestStepMisuse: Step outside guarded work and a Step called while
// another of the same run is under way are InvalidArgument; on a store
// that records no steps (Compose, or any store that is no store.Stepper)
// Step is Misconfigured; fn never runs. A bad name is InvalidArgument.
func TestStepMisuse(t *testing.T) {
	ran := false
	mark := func(context.Context) ([]byte, error) { ran = true; return nil, nil }
	if _, err := middleware.Step(t.Context(), "a", mark); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !strings.Contains(err.Error(), "outside guarded work") || ran {
		t.Fatalf("Step outside guarded work: %v (ran %v); want InvalidArgument", err, ran)
	}
	g := newGuard(t, memstore.New())
	_, err := g.Execute(t.Context(), "nested", fpA, func(ctx context.Context) (middleware.Result, error) {
		_, err := middleware.Step(ctx, "outer", func(ctx context.Context) ([]byte, error) {
			_, err := middleware.Step(ctx, "inner", mark)
			if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !strings.Contains(err.Error(), "one at a time") {
				t.Errorf("a Step within a Step: %v; want InvalidArgument", err)
			}
			return nil, nil
		})
		for _, name := range []string{"", strings.Repeat("n", store.MaxStepNameBytes+1), "\xff"} {
			if _, err := middleware.Step(ctx, name, mark); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
				t.Errorf("Step named %q: %v; want InvalidArgument", name, err)
			}
		}
		return middleware.Result{}, err
	})
	if err != nil || ran {
		t.Fatalf("nested steps: %v (ran %v)", err, ran)
	}
	composed, err := middleware.Compose(memstore.New(), newLocker(t, memstore.New()))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []store.Store{composed, hiddenStepper{memstore.New()}} {
		g := newGuard(t, s)
		_, err := g.Execute(t.Context(), "k", fpA, func(ctx context.Context) (middleware.Result, error) {
			_, err := middleware.Step(ctx, "a", mark)
			return middleware.Result{}, err
		})
		if idemkit.CodeOf(err) != idemkit.CodeMisconfigured || !strings.Contains(err.Error(), "not a store.Stepper") || ran {
			t.Fatalf("%T: %v (ran %v); want Misconfigured naming store.Stepper", s, err, ran)
		}
	}
}

// TestStepRoundTrips: a step costs one RecordStep and nothing else; a
// first execution without steps still costs one claim and one
// completion, and a replay one claim.
func TestStepRoundTrips(t *testing.T) {
	s := newStepStore(memstore.New())
	g := newGuard(t, s)
	if _, err := g.Execute(t.Context(), "plain", fpA, value(new(atomic.Int32), "v")); err != nil {
		t.Fatal(err)
	}
	calls := func() [5]int32 {
		return [5]int32{s.claims.Load(), s.completes.Load(), s.steps.Load(), s.releases.Load(), s.gets.Load()}
	}
	if got := calls(); got != [5]int32{1, 1, 0, 0, 0} {
		t.Fatalf("a first execution without steps: claims, completes, steps, releases, gets %v; want 1, 1, 0, 0, 0", got)
	}
	var execs [3]atomic.Int32
	if _, err := g.Execute(t.Context(), "stepped", fpA, threeSteps(&execs, -1, nil)); err != nil {
		t.Fatal(err)
	}
	if got := calls(); got != [5]int32{2, 2, 3, 0, 0} {
		t.Fatalf("a first execution of three steps: claims, completes, steps, releases, gets %v; want one claim, one completion and three steps more", got)
	}
	if _, err := g.Execute(t.Context(), "stepped", fpA, threeSteps(&execs, -1, nil)); err != nil {
		t.Fatal(err)
	}
	if got := calls(); got != [5]int32{3, 2, 3, 0, 0} {
		t.Fatalf("a replay: %v; want one claim more", got)
	}
}

// TestDoResumesFromItsSteps: Do's work (not HTTP) with StepOf: a run that
// fails after its first step is resumed by the next delivery, whose
// StepOf returns the recorded typed result without running; a recorded
// result that does not decode is an error, never a zero value.
func TestDoResumesFromItsSteps(t *testing.T) {
	g := newGuard(t, memstore.New())
	type reservation struct {
		ID    string `json:"id"`
		Units int    `json:"units"`
	}
	var reserves, charges atomic.Int32
	mailDown := errors.New("the mail server is down")
	deliver := func(fail bool) (charge, bool, error) {
		return middleware.Do(t.Context(), g, "msg-1", message{Customer: "c1", Amount: 42}, func(ctx context.Context) (charge, error) {
			r, err := middleware.StepOf(ctx, "reserve", func(context.Context) (reservation, error) {
				reserves.Add(1)
				return reservation{ID: "res_1", Units: 3}, nil
			})
			if err != nil {
				return charge{}, err
			}
			c, err := middleware.StepOf(ctx, "charge", func(context.Context) (charge, error) {
				charges.Add(1)
				return charge{ID: "ch_" + r.ID, Amount: 42 * r.Units}, nil
			})
			if err != nil || fail {
				return charge{}, errors.Join(err, mailDown)
			}
			return c, nil
		})
	}
	if _, _, err := deliver(true); !errors.Is(err, mailDown) {
		t.Fatalf("first delivery: %v; want the work's error", err)
	}
	v, replayed, err := deliver(false)
	if err != nil || replayed || v != (charge{ID: "ch_res_1", Amount: 126}) {
		t.Fatalf("second delivery: %+v, %v, %v; want ch_res_1 for 126, executed", v, replayed, err)
	}
	if reserves.Load() != 1 || charges.Load() != 1 {
		t.Fatalf("reserve ran %d times, charge %d; want each once", reserves.Load(), charges.Load())
	}
	v, replayed, err = deliver(false)
	if err != nil || !replayed || v.ID != "ch_res_1" || charges.Load() != 1 {
		t.Fatalf("third delivery: %+v, %v, %v; want a replay", v, replayed, err)
	}

	// A recorded result that is not what StepOf decodes.
	fail := errors.New("stop")
	_, _, err = middleware.Do(t.Context(), g, "msg-2", nil, func(ctx context.Context) (int, error) {
		_, err := middleware.Step(ctx, "count", func(context.Context) ([]byte, error) { return []byte(`"seven"`), nil })
		return 0, errors.Join(err, fail)
	})
	if !errors.Is(err, fail) {
		t.Fatal(err)
	}
	_, _, err = middleware.Do(t.Context(), g, "msg-2", nil, func(ctx context.Context) (int, error) {
		return middleware.StepOf(ctx, "count", func(context.Context) (int, error) { return 7, nil })
	})
	if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !strings.Contains(err.Error(), `step "count" does not decode into int`) {
		t.Fatalf("a recorded result that does not decode: %v; want InvalidArgument naming the step and the type", err)
	}
}

// TestInspectShowsTheSteps: a running claim's recorded steps appear in
// Inspect, their names and sizes always, their results only with the
// response.
func TestInspectShowsTheSteps(t *testing.T) {
	g := newGuard(t, memstore.New())
	_, err := g.Execute(t.Context(), "k", fpA, func(ctx context.Context) (middleware.Result, error) {
		for _, name := range []string{"reserve", "charge"} {
			if _, err := middleware.Step(ctx, name, func(context.Context) ([]byte, error) { return []byte(name + "-id"), nil }); err != nil {
				return middleware.Result{}, err
			}
		}
		in, ok, err := g.Inspect(ctx, "", "k", false)
		if err != nil || !ok || len(in.Steps) != 2 || in.Steps[0].Name != "reserve" || in.Steps[0].Size != 10 || in.Steps[1].Name != "charge" || in.Steps[1].Size != 9 || in.Steps[0].Result != nil {
			t.Errorf("Inspect without the response: %+v, %v, %v; want two steps with their sizes, without results", in.Steps, ok, err)
		}
		in, _, _ = g.Inspect(ctx, "", "k", true)
		if len(in.Steps) != 2 || string(in.Steps[1].Result) != "charge-id" {
			t.Errorf("Inspect with the response: %+v; want the results", in.Steps)
		}
		return middleware.Result{Value: []byte("done")}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if in, _, _ := g.Inspect(t.Context(), "", "k", true); len(in.Steps) != 0 {
		t.Fatalf("the outcome shows steps %+v", in.Steps)
	}
}

// TestStepsThroughTheHTTPMiddleware: a handler behind the net/http
// adapter, reached by a real client over a real listener, marks its steps
// with the request's ctx. A 5xx after its first step is not recorded (the
// claim is released) but its step is: the client's retry resumes after
// it, and a third request replays the response.
func TestStepsThroughTheHTTPMiddleware(t *testing.T) {
	g := newGuard(t, memstore.New())
	mw, err := nethttp.New(g)
	if err != nil {
		t.Fatal(err)
	}
	var reserves, handled atomic.Int32
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := middleware.StepOf(r.Context(), "reserve", func(context.Context) (string, error) {
			return fmt.Sprint("res_", reserves.Add(1)), nil
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if handled.Add(1) == 1 {
			http.Error(w, "the payment provider timed out", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "order with ", id)
	})))
	defer srv.Close()
	post := func() (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Idempotency-Key", "order-1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := post(); code != http.StatusBadGateway {
		t.Fatalf("first request: %d; want 502", code)
	}
	for i := range 2 {
		if code, body := post(); code != http.StatusCreated || body != "order with res_1" {
			t.Fatalf("request %d: %d %q; want 201 with the first reservation", i+2, code, body)
		}
	}
	if reserves.Load() != 1 || handled.Load() != 2 {
		t.Fatalf("reserve ran %d times, the handler %d; want 1 and 2 (the third request replayed)", reserves.Load(), handled.Load())
	}
}
