package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// hookSecret is the secret of the guards whose event hashes the tests
// check.
var hookSecret = []byte("a secret shared by every node!!!")

// spanKey keys, in a call's ctx, the span a tracer's start opened.
type spanKey struct{ tracer string }

// tracer is a hook that opens a "span" in IdempotencyStart (a value in the
// ctx it returns) and records every event with the span its ctx carried.
type tracer struct {
	name  string
	log   *orderLog // shared by the tracers of one guard, in call order; may be nil
	mu    sync.Mutex
	next  int
	start []middleware.Event
	spans []int // the span each start opened
	list  []middleware.Event
	seen  []int // the span each event's ctx carried (0: none)
}

// orderLog records which tracer saw what, in order.
type orderLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *orderLog) add(s string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

func (tr *tracer) IdempotencyStart(ctx context.Context, e middleware.Event) context.Context {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.next++
	tr.start = append(tr.start, e)
	tr.spans = append(tr.spans, tr.next)
	tr.log.add(tr.name + " start")
	return context.WithValue(ctx, spanKey{tr.name}, tr.next)
}

func (tr *tracer) IdempotencyEvent(ctx context.Context, e middleware.Event) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	span, _ := ctx.Value(spanKey{tr.name}).(int)
	tr.list = append(tr.list, e)
	tr.seen = append(tr.seen, span)
	tr.log.add(tr.name + " " + e.Kind.String())
}

func (tr *tracer) events() ([]middleware.Event, []int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]middleware.Event(nil), tr.list...), append([]int(nil), tr.seen...)
}

func (tr *tracer) count(kind middleware.EventKind) int {
	list, _ := tr.events()
	n := 0
	for _, e := range list {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// outcomeEnv is where one case of TestOneOutcomePerCall makes its call.
type outcomeEnv struct {
	t    *testing.T
	tr   *tracer
	ctx  context.Context         // watched; the observed call is made with it (or a ctx derived from it)
	opts []middleware.CallOption // the observed call's Scope and Operation; give them to the calls that prepare its key too
	work atomic.Int32            // runs of the observed call's work
	info middleware.CallInfo     // what that work read from its ctx
	span int                     // the tracer's span that work's ctx carried
}

// guard returns a guard on s that reports to the case's tracer.
func (env *outcomeEnv) guard(s store.Store, opts ...middleware.Option) *middleware.Guard {
	opts = append([]middleware.Option{middleware.WithHook(env.tr), middleware.WithSecret(hookSecret), fastBackoff}, opts...)
	return newGuard(env.t, s, opts...)
}

// fn is the observed call's work: it records what it read from its ctx,
// runs for a millisecond at least, and answers v.
// verdict is what a test's work asks the guard to do with its result.
type verdict int

const (
	doRecord        verdict = iota
	doForget                // DoNotRecord
	doNotReplayable         // Result.NotReplayable
)

func (v verdict) result(ctx context.Context, value string) middleware.Result {
	if v == doForget {
		middleware.DoNotRecord(ctx)
	}
	return middleware.Result{Value: []byte(value), NotReplayable: v == doNotReplayable}
}

func (env *outcomeEnv) fn(v string, verdict verdict, err error) middleware.Func {
	return func(ctx context.Context) (middleware.Result, error) {
		env.work.Add(1)
		env.info, _ = middleware.CallInfoFrom(ctx)
		env.span, _ = ctx.Value(spanKey{env.tr.name}).(int)
		time.Sleep(time.Millisecond)
		return verdict.result(ctx, v), err
	}
}

// call makes the observed call: key "k" under the case's scope and
// operation, with opts.
func (env *outcomeEnv) call(g *middleware.Guard, fp fingerprint.Fingerprint, fn middleware.Func, opts ...middleware.CallOption) (middleware.Outcome, error) {
	return g.Execute(env.ctx, "k", fp, fn, append(append([]middleware.CallOption(nil), env.opts...), opts...)...)
}

// prepare executes key "k" through an unobserved guard on s.
func (env *outcomeEnv) prepare(s store.Store, v string, verdict verdict, opts ...middleware.CallOption) middleware.Outcome {
	env.t.Helper()
	out, err := newGuard(env.t, s).Execute(context.Background(), "k", fpA, func(ctx context.Context) (middleware.Result, error) {
		return verdict.result(ctx, v), nil
	}, append(append([]middleware.CallOption(nil), env.opts...), opts...)...)
	if err != nil || !out.Recorded {
		env.t.Fatalf("preparing the key: %+v, %v", out, err)
	}
	return out
}

// hold runs a call on key "k" of s through an unobserved guard until the
// returned function is called; its work has started when hold returns.
func (env *outcomeEnv) hold(s store.Store, opts ...middleware.CallOption) (finish func()) {
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = newGuard(env.t, s).Execute(context.Background(), "k", fpA, func(context.Context) (middleware.Result, error) {
			close(entered)
			<-release
			return middleware.Result{Value: []byte("held")}, nil
		}, append(append([]middleware.CallOption(nil), env.opts...), opts...)...)
	}()
	<-entered
	var once sync.Once
	return func() { once.Do(func() { close(release); <-done }) }
}

// claimFailing is a store whose claims fail with err.
func claimFailing(err error) store.Store {
	return &faultyStore{Store: memstore.New(), claimErr: err}
}

// TestOneOutcomePerCall: every outcome reachable with a memory store (and
// wrappers that inject faults) reaches the hooks as exactly one outcome
// event, the call's last, after exactly one start (none for a call
// rejected before it starts); the outcome carries the call's operation and
// hashed key and scope, and is what a watched ctx reports; every event's
// ctx, and the work's, carries what the start returned.
func TestOneOutcomePerCall(t *testing.T) {
	transient := idemkit.NewError(idemkit.CodeServiceUnavailable, "claim", "injected: connection refused", nil)
	sealKey, retired := guardtest.SealKeys()
	boom := errors.New("card declined")
	cases := []struct {
		name    string
		want    middleware.EventKind
		between []middleware.EventKind // the events before the outcome, in order
		ran     bool                   // the work ran (once)
		// run makes the observed call and checks its answer and outcome.
		run func(env *outcomeEnv) (middleware.Outcome, error)
		// check checks the outcome event against the call's answer.
		check func(t *testing.T, e middleware.Event, out middleware.Outcome, err error)
	}{
		{
			name: "executed and recorded", want: middleware.EventExecuted, ran: true,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				return env.call(env.guard(memstore.New()), fpA, env.fn("created", doRecord, nil))
			},
			check: func(t *testing.T, e middleware.Event, out middleware.Outcome, err error) {
				if err != nil || !out.Recorded || !e.Recorded || e.Size != len("created") || e.Fence != out.Fence || e.Fence == 0 || e.Err != nil || e.Attempts != 1 {
					t.Fatalf("%+v for %+v, %v", e, out, err)
				}
			},
		},
		{
			name: "executed through Do", want: middleware.EventExecuted, ran: true,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				work := env.fn("ch_1", doRecord, nil)
				v, replayed, err := middleware.Do(env.ctx, env.guard(memstore.New()), "k", message{Customer: "c1"}, func(ctx context.Context) (string, error) {
					res, err := work(ctx)
					return string(res.Value), err
				}, env.opts...)
				if v != "ch_1" || replayed {
					env.t.Fatalf("Do: %q, %v", v, replayed)
				}
				return middleware.Outcome{Recorded: true, Fence: env.info.Fence}, err
			},
			check: func(t *testing.T, e middleware.Event, out middleware.Outcome, err error) {
				if err != nil || !e.Recorded || e.Size != len(`"ch_1"`) || e.Fence != out.Fence || e.Fence == 0 {
					t.Fatalf("%+v for %v", e, err)
				}
			},
		},
		{
			name: "replayed through Do", want: middleware.EventReplayed,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				s := memstore.New()
				first, _, err := middleware.Do(context.Background(), newGuard(env.t, s), "k", nil, func(context.Context) (int, error) { return 42, nil }, env.opts...)
				if err != nil {
					env.t.Fatal(err)
				}
				v, replayed, err := middleware.Do(env.ctx, env.guard(s), "k", nil, func(context.Context) (int, error) { return 0, errors.New("ran again") }, env.opts...)
				if v != first || !replayed {
					env.t.Fatalf("Do: %v, %v; want %v replayed", v, replayed, first)
				}
				return middleware.Outcome{Replayed: true}, err
			},
			check: func(t *testing.T, e middleware.Event, _ middleware.Outcome, err error) {
				if err != nil || e.Size != len("42") || e.Fence == 0 {
					t.Fatalf("%+v for %v", e, err)
				}
			},
		},
		{
			name: "executed, DoNotRecord", want: middleware.EventExecuted, ran: true,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				return env.call(env.guard(memstore.New()), fpA, env.fn("503", doForget, nil))
			},
			check: func(t *testing.T, e middleware.Event, out middleware.Outcome, err error) {
				if err != nil || out.Recorded || e.Recorded || e.Fence != out.Fence || e.Err != nil {
					t.Fatalf("%+v for %+v, %v", e, out, err)
				}
			},
		},
		{
			name: "executed, the work failed", want: middleware.EventExecuted, ran: true,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				return env.call(env.guard(memstore.New()), fpA, env.fn("", doRecord, boom))
			},
			check: func(t *testing.T, e middleware.Event, out middleware.Outcome, err error) {
				if !errors.Is(err, boom) || e.Err != boom || e.Recorded || e.Fence != out.Fence {
					t.Fatalf("%+v for %+v, %v", e, out, err)
				}
			},
		},
		{
			name: "not recorded: the claim was forgotten while the work ran", want: middleware.EventNotRecorded, ran: true,
			between: []middleware.EventKind{middleware.EventLeaseLost},
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				s := memstore.New()
				g := env.guard(s)
				work := env.fn("late", doRecord, nil)
				return env.call(g, fpA, func(ctx context.Context) (middleware.Result, error) {
					info, _ := middleware.CallInfoFrom(ctx)
					if ok, err := newGuard(env.t, s).Forget(context.Background(), info.Scope, info.Key, middleware.Force()); !ok || err != nil {
						return middleware.Result{}, fmt.Errorf("Forget: %v, %v", ok, err)
					}
					return work(ctx)
				})
			},
			check: func(t *testing.T, e middleware.Event, out middleware.Outcome, err error) {
				if err != nil || out.Recorded || string(out.Value) != "late" || e.Recorded || !errors.Is(e.Err, idemkit.ErrLeaseLost) || e.Fence != out.Fence {
					t.Fatalf("%+v for %+v, %v", e, out, err)
				}
			},
		},
		{
			name: "replayed", want: middleware.EventReplayed,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				s := memstore.New()
				first := env.prepare(s, "stored", doRecord)
				out, err := env.call(env.guard(s), fpA, env.fn("again", doRecord, nil))
				if out.Fence != first.Fence {
					env.t.Fatalf("replayed fence %v; want %v", out.Fence, first.Fence)
				}
				return out, err
			},
			check: func(t *testing.T, e middleware.Event, out middleware.Outcome, err error) {
				if err != nil || !out.Replayed || e.Size != len("stored") || e.Fence != out.Fence || e.Recorded || e.Ran != 0 || e.Err != nil {
					t.Fatalf("%+v for %+v, %v", e, out, err)
				}
			},
		},
		{
			name: "mismatch", want: middleware.EventMismatch,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				s := memstore.New()
				env.prepare(s, "stored", doRecord)
				return env.call(env.guard(s), fpB, env.fn("other", doRecord, nil))
			},
			check: func(t *testing.T, e middleware.Event, _ middleware.Outcome, err error) {
				var me *middleware.MismatchError
				if !errors.As(err, &me) || e.Err != err || e.Fence == 0 {
					t.Fatalf("%+v for %v", e, err)
				}
			},
		},
		{
			name: "credentials mismatch", want: middleware.EventCredentialsMismatch,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				s := memstore.New()
				env.prepare(s, "alice's", doRecord, middleware.Credentials("Bearer alice"))
				return env.call(env.guard(s), fpA, env.fn("bob's", doRecord, nil), middleware.Credentials("Bearer bob"))
			},
			check: func(t *testing.T, e middleware.Event, _ middleware.Outcome, err error) {
				if err != middleware.ErrCredentialsMismatch || e.Err != err || e.Size != 0 {
					t.Fatalf("%+v for %v", e, err)
				}
			},
		},
		{
			name: "in progress", want: middleware.EventInProgress,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				s := memstore.New()
				finish := env.hold(s)
				defer finish()
				return env.call(env.guard(s), fpA, env.fn("dup", doRecord, nil), middleware.WaitBudget(0))
			},
			check: func(t *testing.T, e middleware.Event, _ middleware.Outcome, err error) {
				var ie *middleware.InProgressError
				if !errors.As(err, &ie) || e.Err != err || e.Attempts != 1 || e.Fence == 0 {
					t.Fatalf("%+v for %v", e, err)
				}
			},
		},
		{
			name: "not replayable", want: middleware.EventNotReplayable,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				s := memstore.New()
				first := env.prepare(s, "streamed", doNotReplayable)
				_, err := env.call(env.guard(s), fpA, env.fn("again", doRecord, nil))
				var ne *middleware.NotReplayableError
				if !errors.As(err, &ne) || ne.Fence != first.Fence {
					env.t.Fatalf("%v; want a NotReplayableError of fence %v", err, first.Fence)
				}
				return middleware.Outcome{Fence: first.Fence}, err
			},
			check: func(t *testing.T, e middleware.Event, out middleware.Outcome, err error) {
				if e.Err != err || e.Fence != out.Fence {
					t.Fatalf("%+v for %v", e, err)
				}
			},
		},
		{
			name: "unavailable", want: middleware.EventUnavailable,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				return env.call(env.guard(claimFailing(transient)), fpA, env.fn("v", doRecord, nil))
			},
			check: wantUnavailable(transient),
		},
		{
			name: "unavailable: fail open, but the failure is not transient", want: middleware.EventUnavailable,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				internal := idemkit.NewError(idemkit.CodeInternal, "claim", "injected: malformed reply", nil)
				return env.call(env.guard(claimFailing(internal)), fpA, env.fn("v", doRecord, nil), middleware.FailOpen())
			},
			check: func(t *testing.T, e middleware.Event, out middleware.Outcome, err error) {
				wantUnavailable(idemkit.ErrInternal)(t, e, out, err)
			},
		},
		{
			name: "unavailable: fail open, but the record cannot be opened (transient code)", want: middleware.EventUnavailable,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				unsealable := idemkit.NewError(idemkit.CodeServiceUnavailable, "claim", "injected", store.ErrUnsealable)
				return env.call(env.guard(claimFailing(unsealable)), fpA, env.fn("v", doRecord, nil), middleware.FailOpen())
			},
			check: wantUnavailable(store.ErrUnsealable),
		},
		{
			name: "unavailable: fail open, but the record is sealed under a retired key", want: middleware.EventUnavailable,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				s := memstore.New()
				env.prepare(sealed(env.t, s, sealKey), "secret", doRecord)
				return env.call(env.guard(sealed(env.t, s, retired)), fpA, env.fn("v", doRecord, nil), middleware.FailOpen())
			},
			check: wantUnavailable(store.ErrUnsealable),
		},
		{
			name: "canceled while waiting", want: middleware.EventCanceled,
			between: []middleware.EventKind{middleware.EventWaiting},
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				s := memstore.New()
				finish := env.hold(s)
				defer finish()
				ctx, cancel := context.WithCancel(env.ctx)
				defer cancel()
				env.ctx = ctx
				// The client goes away once the call waits.
				leave := middleware.WithHook(middleware.HookFunc(func(_ context.Context, e middleware.Event) {
					if e.Kind == middleware.EventWaiting {
						cancel()
					}
				}))
				return env.call(env.guard(s, leave), fpA, env.fn("dup", doRecord, nil), middleware.WaitBudget(time.Hour))
			},
			check: func(t *testing.T, e middleware.Event, _ middleware.Outcome, err error) {
				if !errors.Is(err, context.Canceled) || e.Err != err || e.Attempts < 1 {
					t.Fatalf("%+v for %v", e, err)
				}
			},
		},
		{
			name: "canceled before the claim", want: middleware.EventCanceled,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				ctx, cancel := context.WithCancel(env.ctx)
				cancel()
				env.ctx = ctx
				return env.call(env.guard(memstore.New()), fpA, env.fn("v", doRecord, nil), middleware.FailOpen())
			},
			check: func(t *testing.T, e middleware.Event, _ middleware.Outcome, err error) {
				if !errors.Is(err, context.Canceled) || idemkit.CodeOf(err) != idemkit.CodeAborted || e.Err != err {
					t.Fatalf("%+v for %v", e, err)
				}
			},
		},
		{
			name: "failed open", want: middleware.EventFailedOpen, ran: true,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				fs := claimFailing(transient).(*faultyStore)
				out, err := env.call(env.guard(fs), fpA, env.fn("unguarded", doRecord, nil), middleware.FailOpen())
				if fs.completes.Load() != 0 || fs.releases.Load() != 0 {
					env.t.Fatalf("%d completes and %d releases; want nothing written", fs.completes.Load(), fs.releases.Load())
				}
				if _, ok, _ := newGuard(env.t, fs.Store).Inspect(context.Background(), "tenant:1", "k", false); ok {
					env.t.Fatal("a call that failed open left a record")
				}
				return out, err
			},
			check: func(t *testing.T, e middleware.Event, out middleware.Outcome, err error) {
				if err != nil || out.Recorded || out.Replayed || string(out.Value) != "unguarded" || out.Fence != 0 || e.Fence != 0 || e.Recorded ||
					!errors.Is(e.Err, middleware.ErrUnavailable) || !errors.Is(e.Err, transient) {
					t.Fatalf("%+v for %+v, %v", e, out, err)
				}
			},
		},
		{
			name: "rejected: empty key", want: middleware.EventRejected,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				return env.guard(memstore.New()).Execute(env.ctx, "", fpA, env.fn("v", doRecord, nil), env.opts...)
			},
			check: func(t *testing.T, e middleware.Event, _ middleware.Outcome, err error) {
				if !errors.Is(err, middleware.ErrInvalidKey) || e.Err != err {
					t.Fatalf("%+v for %v", e, err)
				}
			},
		},
		{
			name: "rejected: invalid record TTL", want: middleware.EventRejected,
			run: func(env *outcomeEnv) (middleware.Outcome, error) {
				return env.call(env.guard(memstore.New()), fpA, env.fn("v", doRecord, nil), middleware.RecordTTL(-time.Minute))
			},
			check: func(t *testing.T, e middleware.Event, _ middleware.Outcome, err error) {
				if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || e.Err != err {
					t.Fatalf("%+v for %v", e, err)
				}
			},
		},
	}
	hasher := idemkit.NewHMACHasher(hookSecret)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, outcome := middleware.WatchOutcome(context.WithValue(t.Context(), spanKey{"caller"}, 1))
			env := &outcomeEnv{t: t, tr: &tracer{name: "t"}, ctx: ctx,
				opts: []middleware.CallOption{middleware.Operation("POST /payments"), middleware.Scope("tenant:1")}}
			out, err := c.run(env)
			list, seen := env.tr.events()
			if len(list) == 0 {
				t.Fatal("no event")
			}
			e := list[len(list)-1]
			var kinds []middleware.EventKind
			for _, ev := range list[:len(list)-1] {
				kinds = append(kinds, ev.Kind)
			}
			if e.Kind != c.want || fmt.Sprint(kinds) != fmt.Sprint(c.between) {
				t.Fatalf("events %v then %v; want %v then %v", kinds, e.Kind, c.between, c.want)
			}
			for _, ev := range list[:len(list)-1] {
				if ev.Kind.Outcome() {
					t.Fatalf("two outcomes: %v and %v", ev.Kind, e.Kind)
				}
			}
			if !e.Kind.Outcome() {
				t.Fatalf("the last event %v is not an outcome", e.Kind)
			}
			c.check(t, e, out, err)

			// The start, and the ctx it returned.
			wantStarts := 1
			if c.want == middleware.EventRejected {
				wantStarts = 0
			}
			if len(env.tr.start) != wantStarts {
				t.Fatalf("%d starts; want %d", len(env.tr.start), wantStarts)
			}
			for i, ev := range list {
				if span := seen[i]; wantStarts == 1 && span != env.tr.spans[0] || wantStarts == 0 && span != 0 {
					t.Fatalf("event %v got a ctx with span %d; want the start's", ev.Kind, span)
				}
			}
			if wantStarts == 1 {
				s := env.tr.start[0]
				if s.Kind != middleware.EventStart || s.Operation != "POST /payments" || s.KeyHash != hasher.Hash("k") || s.ScopeHash != hasher.Hash("tenant:1") || s.Attempts != 0 {
					t.Fatalf("start %+v", s)
				}
			}

			// What every event carries.
			for _, ev := range list {
				if ev.Operation != "POST /payments" || ev.ScopeHash != hasher.Hash("tenant:1") || ev.Duration < 0 {
					t.Fatalf("event %+v lacks the call's operation, scope hash or duration", ev)
				}
				if c.want != middleware.EventRejected && ev.KeyHash != hasher.Hash("k") {
					t.Fatalf("event %+v: key hash %q; want %q", ev, ev.KeyHash, hasher.Hash("k"))
				}
			}
			if e.Duration < e.Ran || e.Waited > e.Duration {
				t.Fatalf("outcome %+v: Ran and Waited must fit in Duration", e)
			}

			// The work: once when it ran, with the call's information and
			// the start's span; never otherwise.
			if runs := env.work.Load(); c.ran && runs != 1 || !c.ran && runs != 0 {
				t.Fatalf("the work ran %d times", runs)
			}
			if c.ran {
				if e.Ran < time.Millisecond {
					t.Fatalf("outcome %+v: Ran %v; the work ran for a millisecond at least", e, e.Ran)
				}
				if env.info.Key != "k" || env.info.Scope != "tenant:1" || env.info.Operation != "POST /payments" || env.info.Fence != out.Fence {
					t.Fatalf("the work read %+v; want key k, its scope, operation and fence %v", env.info, out.Fence)
				}
				if env.span != env.tr.spans[0] {
					t.Fatalf("the work's ctx carries span %d; want the start's %d", env.span, env.tr.spans[0])
				}
			} else if e.Ran != 0 {
				t.Fatalf("outcome %+v: Ran set, but the work did not run", e)
			}

			// The watched ctx saw the same outcome.
			w, ok := outcome()
			if !ok || w.Kind != e.Kind || w.Fence != e.Fence || w.Err != e.Err || w.Recorded != e.Recorded || w.Size != e.Size || w.KeyHash != e.KeyHash {
				t.Fatalf("the watched outcome %+v (%v); want %+v", w, ok, e)
			}
		})
	}
}

func wantUnavailable(cause error) func(t *testing.T, e middleware.Event, _ middleware.Outcome, err error) {
	return func(t *testing.T, e middleware.Event, _ middleware.Outcome, err error) {
		t.Helper()
		var ue *middleware.UnavailableError
		if !errors.As(err, &ue) || ue.Op != "claim" || !errors.Is(err, cause) || e.Err != err {
			t.Fatalf("%+v for %v; want unavailable from the claim, matching %v", e, err, cause)
		}
	}
}

// sealed returns s sealed under k.
func sealed(t *testing.T, s store.Store, k store.SealKey) store.Store {
	t.Helper()
	ss, err := store.Seal(s, k)
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

// notifyingStore calls onClaim after each claim.
type notifyingStore struct {
	store.Store
	onClaim func(n int)
	claims  atomic.Int32
}

func (s *notifyingStore) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	rec, claimed, err := s.Store.Claim(ctx, key, fp, ttl)
	s.onClaim(int(s.claims.Add(1)))
	return rec, claimed, err
}

// TestWaitingOncePerCall: a call that waits for a running duplicate
// through several claims reports waiting once, then its outcome.
func TestWaitingOncePerCall(t *testing.T) {
	s := memstore.New()
	entered, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := newGuard(t, s).Execute(context.Background(), "k", fpA, func(context.Context) (middleware.Result, error) {
			close(entered)
			<-release
			return middleware.Result{Value: []byte("first")}, nil
		})
		first <- err
	}()
	<-entered
	tr := &tracer{name: "t"}
	var once sync.Once
	ns := &notifyingStore{Store: s, onClaim: func(n int) {
		if n == 4 { // four busy answers so far: let the first call finish
			once.Do(func() { close(release) })
		}
	}}
	g := newGuard(t, ns, middleware.WithHook(tr), fastBackoff)
	var runs atomic.Int32
	out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "dup"), middleware.WaitBudget(time.Hour))
	if err != nil || !out.Replayed || string(out.Value) != "first" || runs.Load() != 0 {
		t.Fatalf("the waiting call: %+v, %v, runs %d; want a replay", out, err, runs.Load())
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	list, _ := tr.events()
	if len(list) != 2 || list[0].Kind != middleware.EventWaiting || list[1].Kind != middleware.EventReplayed {
		t.Fatalf("events %v; want waiting, then replayed", list)
	}
	if e := list[1]; e.Attempts < 5 || e.Attempts != int(ns.claims.Load()) || e.Waited <= 0 || e.Waited > e.Duration {
		t.Fatalf("outcome %+v after %d claims; want every claim counted and the wait measured", e, ns.claims.Load())
	}
	if list[0].Fence != list[1].Fence || list[0].Attempts != 1 {
		t.Fatalf("waiting %+v; want it at the first claim, on the running claim's fence %v", list[0], list[1].Fence)
	}
}

// TestHooksChainInOrder: hooks given in several options see every start
// and event in the order given, each start getting the ctx the one before
// returned; the work's ctx carries what every start put in.
func TestHooksChainInOrder(t *testing.T) {
	var log orderLog
	a, b := &tracer{name: "a", log: &log}, &tracer{name: "b", log: &log}
	var bSawA bool
	check := middleware.WithHook(startFunc(func(ctx context.Context) context.Context {
		_, bSawA = ctx.Value(spanKey{"a"}).(int)
		return ctx
	}))
	g := newGuard(t, memstore.New(), middleware.WithHook(a), check, middleware.WithHook(nil), middleware.WithHook(b))
	var spans [2]int
	_, err := g.Execute(t.Context(), "k", fpA, func(ctx context.Context) (middleware.Result, error) {
		spans[0], _ = ctx.Value(spanKey{"a"}).(int)
		spans[1], _ = ctx.Value(spanKey{"b"}).(int)
		return middleware.Result{Value: []byte("v")}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(log.lines), "[a start b start a executed b executed]"; got != want {
		t.Fatalf("order %s; want %s", got, want)
	}
	if !bSawA || spans != [2]int{1, 1} {
		t.Fatalf("the second start saw the first's ctx: %v; the work's ctx carries spans %v; want both", bSawA, spans)
	}
	_, seenA := a.events()
	_, seenB := b.events()
	if seenA[0] != 1 || seenB[0] != 1 {
		t.Fatal("an event's ctx lacks a start's span")
	}
}

// startFunc is a hook with a start only.
type startFunc func(ctx context.Context) context.Context

func (f startFunc) IdempotencyStart(ctx context.Context, _ middleware.Event) context.Context {
	return f(ctx)
}
func (startFunc) IdempotencyEvent(context.Context, middleware.Event) {}

// panicky panics in both methods.
type panicky struct{}

func (panicky) IdempotencyStart(context.Context, middleware.Event) context.Context { panic("start") }
func (panicky) IdempotencyEvent(context.Context, middleware.Event)                 { panic("event") }

// nilStart returns a nil ctx from its start.
type nilStart struct{ middleware.HookFunc }

var noEvents = middleware.HookFunc(func(context.Context, middleware.Event) {})

func (nilStart) IdempotencyStart(context.Context, middleware.Event) context.Context { return nil }

// TestPanickingHookIsContained: a hook that panics in its start and its
// events (or returns a nil ctx) changes nothing for the call nor for the
// hooks after it.
func TestPanickingHookIsContained(t *testing.T) {
	tr := &tracer{name: "t"}
	g := newGuard(t, memstore.New(), middleware.WithHook(panicky{}), middleware.WithHook(nilStart{noEvents}), middleware.WithHook(tr), middleware.WithHook(panicky{}))
	var runs atomic.Int32
	var span int
	for i := range 2 {
		out, err := g.Execute(t.Context(), "k", fpA, func(ctx context.Context) (middleware.Result, error) {
			runs.Add(1)
			span, _ = ctx.Value(spanKey{"t"}).(int)
			return middleware.Result{Value: []byte("v")}, nil
		})
		if err != nil || out.Replayed != (i == 1) {
			t.Fatalf("call %d: %+v, %v", i, out, err)
		}
	}
	if runs.Load() != 1 || span != 1 {
		t.Fatalf("the work ran %d times with span %d; want once, with the tracer's span", runs.Load(), span)
	}
	list, seen := tr.events()
	if len(tr.start) != 2 || len(list) != 2 || list[0].Kind != middleware.EventExecuted || list[1].Kind != middleware.EventReplayed || seen[0] != 1 || seen[1] != 2 {
		t.Fatalf("the hook after the panicking ones saw %d starts, events %v with spans %v", len(tr.start), list, seen)
	}
	ctx, outcome := middleware.WatchOutcome(t.Context())
	g.Bypass(ctx, middleware.EventPassedThrough, nil)
	if e, ok := outcome(); !ok || e.Kind != middleware.EventPassedThrough || tr.count(middleware.EventPassedThrough) != 1 {
		t.Fatalf("Bypass with a panicking hook: %+v, %v", e, ok)
	}
}

// TestBypass: an adapter's pass-through and rejection reach the hooks as
// their only event, an outcome with the operation and the hashed scope;
// any other kind is ignored.
func TestBypass(t *testing.T) {
	tr := &tracer{name: "t"}
	g := newGuard(t, memstore.New(), middleware.WithHook(tr), middleware.WithSecret(hookSecret))
	ctx := context.WithValue(t.Context(), spanKey{"t"}, 42)
	bad := errors.New("malformed Idempotency-Key")
	g.Bypass(ctx, middleware.EventPassedThrough, nil, middleware.Operation("GET /orders"), middleware.Scope("tenant:1"), middleware.RecordTTL(-1))
	g.Bypass(ctx, middleware.EventRejected, bad, middleware.Operation("POST /orders"))
	for _, k := range []middleware.EventKind{0, middleware.EventStart, middleware.EventWaiting, middleware.EventExecuted, middleware.EventReplayed, middleware.EventFailedOpen, 200} {
		g.Bypass(ctx, k, bad)
	}
	list, seen := tr.events()
	if len(tr.start) != 0 || len(list) != 2 {
		t.Fatalf("%d starts, events %v; want no start and two events", len(tr.start), list)
	}
	want := []middleware.Event{
		{Kind: middleware.EventPassedThrough, Operation: "GET /orders", ScopeHash: idemkit.NewHMACHasher(hookSecret).Hash("tenant:1")},
		{Kind: middleware.EventRejected, Operation: "POST /orders", Err: bad},
	}
	for i, e := range list {
		if e != want[i] || seen[i] != 42 {
			t.Fatalf("event %d: %+v with span %d; want %+v with the caller's ctx", i, e, seen[i], want[i])
		}
	}
}

// TestEventHashesAgreeAcrossNodes: two guards given one secret hash keys
// and scopes alike, as idemkit.NewHMACHasher(secret) does; another secret
// hashes them otherwise; without one, hashes are stable in the process and
// never the raw key.
func TestEventHashesAgreeAcrossNodes(t *testing.T) {
	s := memstore.New()
	hashes := func(opts ...middleware.Option) (key, scope string) {
		tr := &tracer{name: "t"}
		g := newGuard(t, s, append(opts, middleware.WithHook(tr))...)
		if _, err := g.Execute(t.Context(), "order-42", fpA, func(context.Context) (middleware.Result, error) {
			return middleware.Result{Value: []byte("v")}, nil
		}, middleware.Scope("tenant-9")); err != nil {
			t.Fatal(err)
		}
		list, _ := tr.events()
		if len(tr.start) != 1 || len(list) != 1 || tr.start[0].KeyHash != list[0].KeyHash || tr.start[0].ScopeHash != list[0].ScopeHash {
			t.Fatalf("start %+v, events %+v; want one of each with the same hashes", tr.start, list)
		}
		return list[0].KeyHash, list[0].ScopeHash
	}
	want := idemkit.NewHMACHasher(hookSecret)
	k1, s1 := hashes(middleware.WithSecret(hookSecret))
	k2, s2 := hashes(middleware.WithSecret(append([]byte(nil), hookSecret...)))
	if k1 != want.Hash("order-42") || k2 != k1 || s1 != want.Hash("tenant-9") || s2 != s1 {
		t.Fatalf("nodes with one secret: key hashes %q, %q, scope hashes %q, %q; want %q and %q", k1, k2, s1, s2, want.Hash("order-42"), want.Hash("tenant-9"))
	}
	if k3, s3 := hashes(middleware.WithSecret([]byte("another secret of 32 bytes long!"))); k3 == k1 || s3 == s1 {
		t.Fatal("another secret gives the same hashes")
	}
	k4, s4 := hashes()
	k5, s5 := hashes()
	if k4 == "" || k4 == "order-42" || k4 != k5 || s4 != s5 || s4 == k4 || k4 == k1 {
		t.Fatalf("without a secret: key hashes %q, %q, scope hashes %q, %q", k4, k5, s4, s5)
	}
}

// TestEventKinds: every kind has its name and tells whether it is an
// outcome.
func TestEventKinds(t *testing.T) {
	for _, c := range []struct {
		kind    middleware.EventKind
		name    string
		outcome bool
	}{
		{0, "unknown", false},
		{middleware.EventStart, "start", false},
		{middleware.EventWaiting, "waiting", false},
		{middleware.EventLeaseLost, "lease-lost", false},
		{middleware.EventBackendError, "backend-error", false},
		{middleware.EventExecuted, "executed", true},
		{middleware.EventNotRecorded, "not-recorded", true},
		{middleware.EventReplayed, "replayed", true},
		{middleware.EventMismatch, "mismatch", true},
		{middleware.EventCredentialsMismatch, "credentials-mismatch", true},
		{middleware.EventInProgress, "in-progress", true},
		{middleware.EventNotReplayable, "not-replayable", true},
		{middleware.EventUnavailable, "unavailable", true},
		{middleware.EventCanceled, "canceled", true},
		{middleware.EventFailedOpen, "failed-open", true},
		{middleware.EventPassedThrough, "passed-through", true},
		{middleware.EventRejected, "rejected", true},
		{middleware.EventRejected + 1, "unknown", false},
		{255, "unknown", false},
	} {
		if c.kind.String() != c.name || c.kind.Outcome() != c.outcome {
			t.Errorf("kind %d: %q, outcome %v; want %q, %v", c.kind, c.kind.String(), c.kind.Outcome(), c.name, c.outcome)
		}
	}
}

// TestHookFunc: HookFunc leaves the start's ctx as it is and gets every
// other event.
func TestHookFunc(t *testing.T) {
	var kinds []middleware.EventKind
	h := middleware.HookFunc(func(_ context.Context, e middleware.Event) { kinds = append(kinds, e.Kind) })
	ctx := context.WithValue(t.Context(), spanKey{"x"}, 1)
	if got := h.IdempotencyStart(ctx, middleware.Event{Kind: middleware.EventStart}); got != ctx {
		t.Fatal("HookFunc's start changed the ctx")
	}
	g := newGuard(t, memstore.New(), middleware.WithHook(h))
	var runs atomic.Int32
	for range 2 {
		if _, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v")); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(kinds) != "[executed replayed]" {
		t.Fatalf("HookFunc got %v", kinds)
	}
}
