package middleware

import (
	"context"
	"sync/atomic"
	"time"
)

// opContext bounds one backend call by the op timeout without arming a
// timer until something waits on Done. A backend that only checks Err (the
// in-process memstore) pays nothing for the deadline; a network client,
// which waits on Done or derives contexts, gets an ordinary deadline
// context (created on first use), and from then on every method answers
// from it, so the pair behaves exactly as context.WithDeadline would.
//
// Before the deadline context exists, Err is judged from the parent and the
// clock, Value from the parent. A detached opContext ignores its parent's
// cancellation and deadline, as one made from context.WithoutCancel(parent)
// would, and keeps its values.
//
// An opContext is used for one backend call: the guard embeds one in the
// state of a call for its first claim and one for its first completion, so
// the common path allocates none; it must not be copied once in use.
type opContext struct {
	parent   context.Context
	deadline time.Time
	detached bool
	timed    atomic.Pointer[timedContext] // set once, by Done, AfterFunc (the deadline context) or release (released)
}

type timedContext struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// newOpContext returns a context bounded by d from now (or parent's
// earlier deadline, unless detached); the caller releases it when the call
// is over.
func newOpContext(parent context.Context, now time.Time, d time.Duration, detached bool) *opContext {
	c := new(opContext)
	c.init(parent, now, d, detached)
	return c
}

// init prepares an unused opContext: bounded by d from now (or parent's
// earlier deadline, unless detached).
func (c *opContext) init(parent context.Context, now time.Time, d time.Duration, detached bool) {
	c.parent, c.deadline, c.detached = parent, now.Add(d), detached
	if detached {
		return
	}
	if pd, ok := parent.Deadline(); ok && pd.Before(c.deadline) {
		c.deadline = pd
	}
}

// timedCtx returns the deadline context, creating it on first use. Of two
// created at once, one is kept and the other cancelled.
func (c *opContext) timedCtx() context.Context {
	if t := c.timed.Load(); t != nil {
		return t.ctx
	}
	base := c.parent
	if c.detached {
		base = context.WithoutCancel(base)
	}
	ctx, cancel := context.WithDeadline(base, c.deadline)
	if !c.timed.CompareAndSwap(nil, &timedContext{ctx: ctx, cancel: cancel}) {
		cancel()
	}
	return c.timed.Load().ctx
}

// release ends the context: a deadline context that exists is cancelled;
// otherwise none is created, and a late Done or Err sees a cancelled one.
func (c *opContext) release() {
	if c.timed.CompareAndSwap(nil, released) {
		return
	}
	c.timed.Load().cancel()
}

// cancelled is a context that is already cancelled.
var cancelled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// released is what an opContext released before anything waited on it
// answers from.
var released = &timedContext{ctx: cancelled, cancel: func() {}}

// Deadline implements context.Context.
func (c *opContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Done implements context.Context.
func (c *opContext) Done() <-chan struct{} { return c.timedCtx().Done() }

// Err implements context.Context.
func (c *opContext) Err() error {
	if t := c.timed.Load(); t != nil {
		return t.ctx.Err()
	}
	if !c.detached {
		if err := c.parent.Err(); err != nil {
			return err
		}
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// Value implements context.Context. Once the deadline context exists it
// answers, so that context.Cause and contexts derived from this one see it
// as they would a context.WithDeadline.
func (c *opContext) Value(key any) any {
	if t := c.timed.Load(); t != nil {
		return t.ctx.Value(key)
	}
	if c.detached {
		// WithoutCancel hides the parent's cancellation from context.Cause.
		return context.WithoutCancel(c.parent).Value(key)
	}
	return c.parent.Value(key)
}

// AfterFunc lets contexts derived from this one follow it without a
// goroutine of their own (context.WithCancel looks for this method).
func (c *opContext) AfterFunc(f func()) (stop func() bool) {
	return context.AfterFunc(c.timedCtx(), f)
}
