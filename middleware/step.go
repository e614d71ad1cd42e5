package middleware

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// ErrStepMismatch is matched (errors.Is) by the error of a [Step] whose
// name is not the one recorded at its place for the key: the work's code
// changed while the key's claim was left with steps (a deploy between a
// crash and its retry). Its error names both; its code is InvalidArgument.
// The guard does not guess: every retry gets the same error until an
// operator drops the steps with [Guard.Forget] and [Force] (the work then
// runs from its first step again) or they expire with the record TTL.
var ErrStepMismatch = errors.New("idempotency: the step is not the one recorded at its place")

// errStepRefused is the cause of an outcome not recorded after a step's
// recording was refused, when fn's ctx ended otherwise first.
var errStepRefused = fmt.Errorf("%w: a step's recording was refused: the record no longer carries this claim", idemkit.ErrLeaseLost)

// steps is the state of a call's steps.
type steps struct {
	recorded []store.Step // the claim's steps, carried over from earlier claims of the key
	busy     atomic.Bool  // a Step runs
	next     int          // the index of the next Step (with busy)
	bytes    int          // what steps 0 to next-1 count against store.MaxStepBytes (with busy)
	lost     atomic.Bool  // a step's recording was refused: the claim is lost
}

// Step runs fn once as step number i of the guarded work that ctx belongs
// to, where i counts the Step calls of this run of the work, and records
// fn's result in the claim's record (under its fence, kept as long as an
// outcome would be) before it returns it. When the work runs again for the
// key (a retry after a crash, a lost lease or an error that released the
// claim), a step already recorded returns its recorded result without
// running fn: the work resumes after its last recorded step. See
// docs/guard.md ("Steps (recovery points)") for when to use steps and
// what a step must not do.
//
// ctx is the ctx the guard gives the work, or one derived from it; fn gets
// it. On a store whose work is transactional ([store.StepWork]: pgstore,
// mysqlstore), fn's writes through the engine's Tx(ctx) are a transaction
// of the step's own, which commits with the step's recording: both land or
// neither does. Steps run one at a time, in the same order on every run, each under
// a name of 1 to [store.MaxStepNameBytes] bytes of UTF-8 that does not
// change between runs. A name other than the recorded one at its place is
// an error matching [ErrStepMismatch]. fn's error records nothing and is
// returned as it is; Step can be called again after it.
//
// The other errors are [*idemkit.Error] values (op "step"):
//   - InvalidArgument: Step outside guarded work, concurrent Step calls in
//     one run, a bad name, or a step beyond the limits: more than
//     [store.MaxSteps] steps, or names and results over [store.MaxStepBytes]
//     in all (matching store.ErrTooLarge; refused before fn runs when the
//     name does not fit, after it when its result does not);
//   - Misconfigured: the guard's store records no steps (it is not a
//     [store.Stepper]: [Compose], or a decorator that does not pass the
//     capability through);
//   - the ctx's error when it ended before the step.
//
// A recording the backend refuses means the claim was lost: Step returns
// an [*UnavailableError] matching idemkit.ErrLeaseLost, the work's ctx ends
// with that cause, and the guard records no outcome. A backend that fails
// is retried like a completion, up to the record write timeout, then
// reported as an [*UnavailableError]. A call that failed open ([FailOpen])
// runs fn and records nothing.
func Step(ctx context.Context, name string, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	c, ok := ctx.Value(callKey{}).(*call)
	if !ok {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "step", "Step is called outside guarded work: pass it the ctx the guard gives the work (Execute's or Do's fn, an adapter's request context)", nil)
	}
	if fn == nil {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "step", "the step's fn is nil", nil)
	}
	return c.step(ctx, name, fn)
}

// StepOf is [Step] for a typed result, recorded as JSON: T must round-trip
// through encoding/json. A recorded result that does not decode into T is
// an error (InvalidArgument, op "step"), never a zero value; so is a
// result that cannot be encoded, which records nothing.
func StepOf[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var v T
	ran := false
	b, err := Step(ctx, name, func(ctx context.Context) ([]byte, error) {
		ran = true
		r, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		v = r
		b, err := json.Marshal(r)
		if err != nil {
			return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "step", fmt.Sprintf("the result of step %q cannot be encoded as JSON; nothing is recorded", name), err)
		}
		return b, nil
	})
	var zero T
	if err != nil {
		return zero, err
	}
	if ran {
		return v, nil
	}
	var got T
	if err := json.Unmarshal(b, &got); err != nil {
		return zero, idemkit.NewError(idemkit.CodeInvalidArgument, "step", fmt.Sprintf("the recorded result of step %q does not decode into %T: did its type change?", name, zero), err)
	}
	return got, nil
}

// step runs Step for the call c.
func (c *call) step(ctx context.Context, name string, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	const op = "step"
	st := &c.steps
	if !st.busy.CompareAndSwap(false, true) {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("step %q is called while another step of the same run is under way: steps run one at a time, in order", name), nil)
	}
	defer st.busy.Store(false)
	if name == "" || len(name) > store.MaxStepNameBytes || !utf8.ValidString(name) {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("a step name must be 1 to %d bytes of UTF-8 (got %d bytes)", store.MaxStepNameBytes, len(name)), nil)
	}
	if ctx.Err() != nil {
		if cause := context.Cause(ctx); errors.Is(cause, idemkit.ErrLeaseLost) {
			return nil, &UnavailableError{Op: op, Err: cause}
		}
		return nil, idemkit.CheckContext(ctx, op)
	}
	i := st.next
	if c.lease == nil {
		// Failed open: the work runs unguarded, and nothing is recorded.
		res, err := fn(ctx)
		if err == nil {
			st.next++
		}
		return res, err
	}
	stepper, ok := c.g.store.(store.Stepper)
	if !ok {
		return nil, idemkit.NewError(idemkit.CodeMisconfigured, op, fmt.Sprintf("the guard's store (%T) records no steps: it is not a store.Stepper; every engine of idemkit is one (memstore, redisstore, pgstore, mysqlstore, firestorestore, dynamostore), and so is a sealed store over one", c.g.store), nil)
	}
	if i < len(st.recorded) {
		rec := st.recorded[i]
		if rec.Name != name {
			return nil, idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("step %d is %q in the key's record but the work calls it %q: the work's code changed while the key had steps recorded; inspect the key, and forget it (with force) to run the work from its first step", i, rec.Name, name), ErrStepMismatch)
		}
		st.next++
		st.bytes += rec.Size()
		c.emit(Event{Kind: EventStepReplayed, Fence: c.fence, StepName: name, StepIndex: i, Size: len(rec.Result)})
		return rec.Result, nil
	}
	if i >= store.MaxSteps {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("step %q would be step %d: a run records at most %d steps", name, i+1, store.MaxSteps), store.ErrTooLarge)
	}
	if st.bytes+len(name) > store.MaxStepBytes {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("step %q does not fit: the steps before it take %d of the %d bytes a run's steps may take", name, st.bytes, store.MaxStepBytes), store.ErrTooLarge)
	}
	start := time.Now()
	var res []byte
	if sw, ok := c.work.(store.StepWork); ok {
		// Transactional steps: fn's writes commit with its recovery point.
		var err error
		if res, err = c.stepWork(ctx, sw, i, name, fn); err != nil {
			return nil, err
		}
	} else {
		var err error
		if res, err = fn(ctx); err != nil {
			return nil, err
		}
		if err := c.overLimit(name, res, "it ran, but is not recorded"); err != nil {
			return nil, err
		}
		if err := c.recordStep(ctx, stepper, i, store.Step{Name: name, Result: res}); err != nil {
			return nil, err
		}
	}
	ran := time.Since(start)
	s := store.Step{Name: name, Result: res}
	st.next++
	st.bytes += s.Size()
	c.emit(Event{Kind: EventStepRecorded, Fence: c.fence, StepName: name, StepIndex: i, Size: len(res), Ran: ran})
	return res, nil
}

// stepWork runs fn as step i of the call's claim in a transaction of its
// own that commits with the step's recovery point ([store.StepWork]): fn's
// writes and the step land together or not at all. A step that would take
// the run's steps over [store.MaxStepBytes] is refused after fn ran, its
// writes rolled back; a refusal means the claim is lost, as for
// recordStep.
func (c *call) stepWork(ctx context.Context, sw store.StepWork, i int, name string, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	const op = "step"
	var fnErr, over error
	res, ok, err := sw.Step(ctx, i, name, c.stepKeep(), func(ctx context.Context) ([]byte, error) {
		res, err := fn(ctx)
		if err != nil {
			fnErr = err
			return nil, err
		}
		if over = c.overLimit(name, res, "its writes are rolled back and nothing is recorded"); over != nil {
			return nil, over
		}
		return res, nil
	})
	switch {
	case err != nil && fnErr != nil && errors.Is(err, fnErr):
		return nil, fnErr // fn's own error, its writes rolled back
	case err != nil && over != nil && errors.Is(err, over):
		return nil, over
	case err != nil && idemkit.CodeOf(err) == idemkit.CodeInvalidArgument:
		return nil, err // a misuse: a step once the work's own transaction began
	case err != nil && ctx.Err() != nil:
		// The lease was lost (or the caller went away) while the step
		// ran: its transaction was rolled back.
		return nil, &UnavailableError{Op: op, Err: fmt.Errorf("%w (step %d %q was rolled back)", context.Cause(ctx), i, name)}
	case err != nil:
		// The step's transaction failed (rolled back: the step can run
		// again) or the backend did (its fate unknown).
		return nil, c.backendFailed(ctx, err)
	case !ok:
		return nil, c.claimLost(i, name, "was rolled back")
	}
	return res, nil
}

// overLimit returns the error of a step whose result res takes the run's
// steps over [store.MaxStepBytes] (what became of it said by fate), or
// nil.
func (c *call) overLimit(name string, res []byte, fate string) error {
	total := c.steps.bytes + len(name) + len(res)
	if total <= store.MaxStepBytes {
		return nil
	}
	return idemkit.NewError(idemkit.CodeInvalidArgument, "step", fmt.Sprintf("the result of step %q (%d bytes) takes the run's steps to %d bytes, over the limit of %d: %s; record an id, not a document", name, len(res), total, store.MaxStepBytes, fate), store.ErrTooLarge)
}

// claimLost ends the call's lease because the record refused step i
// (name; what became of it said by fate): the claim is lost, and the call
// will not complete.
func (c *call) claimLost(i int, name, fate string) error {
	lost := fmt.Errorf("%w: the record no longer carries this claim; step %d (%q) %s", idemkit.ErrLeaseLost, i, name, fate)
	c.steps.lost.Store(true)
	c.lease.lost(lost)
	return &UnavailableError{Op: "step", Err: lost}
}

// backendFailed reports a failure of the backend while recording a step,
// to the failure log and the hooks, and returns it as the step's error.
func (c *call) backendFailed(ctx context.Context, err error) *UnavailableError {
	c.g.failures.report(ctx, "step", err)
	e := &UnavailableError{Op: "step", Err: err}
	c.emit(Event{Kind: EventBackendError, Fence: c.fence, Err: e})
	return e
}

// stepKeep is how long a step keeps the key's record: as long as its
// outcome would be kept.
func (c *call) stepKeep() time.Duration {
	if c.recordTTLSet {
		return c.recordTTL
	}
	return c.g.cfg.recordTTL
}

// recordStep records s as step i of the call's claim, kept as long as its
// outcome would be, retrying failures with back-off for up to the record
// write timeout (while the lease is extended), and returns nil once it
// landed. A refusal means the claim is lost: fn's ctx ends with the cause,
// and the call will not complete.
func (c *call) recordStep(ctx context.Context, st store.Stepper, i int, s store.Step) error {
	g := c.g
	keep := c.stepKeep()
	start := time.Now()
	uncertain := false // a failed attempt may have landed
	for attempt := 1; ; attempt++ {
		// Detached: the step's effect happened; a caller that went away
		// does not lose its recording.
		op := newOpContext(ctx, time.Now(), g.cfg.opTimeout, true)
		ok, err := st.RecordStep(op, c.recordKey, c.fence, i, s, keep)
		op.release()
		switch {
		case err == nil && ok:
			return nil
		case err == nil && uncertain && c.stepLanded(ctx, i, s):
			return nil
		case err == nil:
			return c.claimLost(i, s.Name, "ran but is not recorded")
		case idemkit.CodeOf(err) == idemkit.CodeInvalidArgument || idemkit.CodeOf(err) == idemkit.CodeMisconfigured:
			return c.backendFailed(ctx, err) // trying again cannot help
		}
		uncertain = true
		c.backendFailed(ctx, err)
		delay := g.cfg.backoff.Delay(attempt)
		if !time.Now().Add(delay).Before(start.Add(g.cfg.recordWriteTimeout)) {
			return &UnavailableError{Op: "step", Err: fmt.Errorf("gave up after %d attempts: %w", attempt, err)}
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			// The lease was lost, or the caller went away: the work is
			// told so by its ctx.
			return &UnavailableError{Op: "step", Err: fmt.Errorf("%w (after %d attempts to record step %d: %v)", context.Cause(ctx), attempt, i, err)}
		}
	}
}

// stepLanded reports whether the claim's record holds s as its step i:
// whether a recording whose answer was lost landed.
func (c *call) stepLanded(ctx context.Context, i int, s store.Step) bool {
	gctx := newOpContext(ctx, time.Now(), c.g.cfg.opTimeout, true)
	defer gctx.release()
	got, ok, err := c.g.store.Get(gctx, c.recordKey)
	return err == nil && ok && got.State == store.StateClaimed && got.Fence == c.fence && len(got.Steps) > i &&
		got.Steps[i].Name == s.Name && bytes.Equal(got.Steps[i].Result, s.Result)
}
