package middleware

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idemkit"
)

type ctxKey struct{}

// fnContextPair is an fnContext and what it stands for, a
// context.WithCancelCause of the same parent, driven alike.
type fnContextPair struct {
	parentCancel context.CancelCauseFunc
	fn           *fnContext
	ref          context.Context
	refCancel    context.CancelCauseFunc
}

func newFnContextPair() *fnContextPair {
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), ctxKey{}, "v"))
	ref, refCancel := context.WithCancelCause(parent)
	return &fnContextPair{parentCancel: cancel, fn: &fnContext{parent: parent}, ref: ref, refCancel: refCancel}
}

func (p *fnContextPair) stop() {
	p.fn.end(context.Canceled, false)
	p.refCancel(context.Canceled)
}

func (p *fnContextPair) lose() {
	cause := idemkit.ErrLeaseLost
	p.fn.end(cause, true)
	p.refCancel(cause)
}

func (p *fnContextPair) cancelParent() { p.parentCancel(errors.New("client went away")) }

func (p *fnContextPair) done() { _ = p.fn.Done() }

// check compares what the two answer: Err, Cause and a value of the
// parent; with waits, also Done (closed or not) and a context derived from
// each, which make the fnContext create its inner context.
func (p *fnContextPair) check(t *testing.T, step string, waits bool) {
	t.Helper()
	closed := func(c context.Context) bool {
		select {
		case <-c.Done():
			return true
		default:
			return false
		}
	}
	fn := context.Context(p.fn)
	if got, want := fn.Err(), p.ref.Err(); got != want {
		t.Fatalf("%s: Err %v; want %v", step, got, want)
	}
	if got, want := context.Cause(fn), context.Cause(p.ref); got != want {
		t.Fatalf("%s: Cause %v; want %v", step, got, want)
	}
	if got, want := fn.Value(ctxKey{}), p.ref.Value(ctxKey{}); got != want {
		t.Fatalf("%s: Value %v; want %v", step, got, want)
	}
	if !waits {
		return
	}
	if got, want := closed(fn), closed(p.ref); got != want {
		t.Fatalf("%s: Done closed %v; want %v", step, got, want)
	}
	d, cancel := context.WithCancel(fn)
	defer cancel()
	rd, rcancel := context.WithCancel(p.ref)
	defer rcancel()
	if got, want := context.Cause(d), context.Cause(rd); got != want {
		t.Fatalf("%s: a derived context's Cause %v; want %v", step, got, want)
	}
}

// TestFnContextEndsAsWithCancelCause: whatever happens in whichever order
// (the caller's ctx ends, the lease is lost, the call stops, fn waits on
// Done), fn's ctx answers as a context.WithCancelCause of the caller's ctx
// would.
func TestFnContextEndsAsWithCancelCause(t *testing.T) {
	steps := map[string]func(*fnContextPair){
		"stop": (*fnContextPair).stop, "lose": (*fnContextPair).lose,
		"cancel parent": (*fnContextPair).cancelParent, "done": (*fnContextPair).done,
	}
	sequences := [][]string{
		{"stop"},
		{"done", "stop"},
		{"stop", "done"},
		{"stop", "cancel parent"},
		{"cancel parent", "stop"},
		{"cancel parent", "done", "stop"},
		{"lose", "stop"},
		{"done", "lose", "stop"},
		{"cancel parent", "lose", "stop"},
		{"lose", "cancel parent", "stop"},
		{"stop", "lose"},
	}
	for _, seq := range sequences {
		p := newFnContextPair()
		p.check(t, "new", false)
		created, stopped := false, false // whether the inner context should exist; whether the call stopped
		for _, s := range seq {
			steps[s](p)
			p.check(t, fmt.Sprint(seq, ": ", s), false)
			created = created || !stopped && (s == "done" || s == "lose")
			stopped = stopped || s == "stop"
		}
		if got := p.fn.inner.Load() != nil; got != created {
			t.Fatalf("%v: the inner context exists: %v; want %v", seq, got, created)
		}
		p.check(t, fmt.Sprint(seq, ": end"), true)
	}
}

// TestFnContextDerivedEndsOnLoss: a context derived from fn's ctx while fn
// runs ends when the lease is lost, with its cause.
func TestFnContextDerivedEndsOnLoss(t *testing.T) {
	p := newFnContextPair()
	d, cancel := context.WithCancel(p.fn)
	defer cancel()
	if d.Err() != nil {
		t.Fatal("the derived context ended early")
	}
	p.lose()
	<-d.Done()
	if !errors.Is(context.Cause(d), idemkit.ErrLeaseLost) {
		t.Fatalf("Cause %v; want ErrLeaseLost", context.Cause(d))
	}
}
