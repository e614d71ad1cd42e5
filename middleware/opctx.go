package middleware

import (
	"context"
	"sync/atomic"
	"time"
)

// opContext bounds one backend call by the op timeout without arming a
// timer until something waits on Done: a backend that only checks Err
// (memstore) pays nothing for the deadline; one that waits gets an
// ordinary deadline context, created on first use, that answers from then
// on. A detached opContext ignores its parent's cancellation and deadline,
// as context.WithoutCancel would. The guard embeds one in a call for its
// first claim and one for its first completion; it must not be copied
// once in use.
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

// timedCtx returns the deadline context, creating it on first use.
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

// release ends the context; a late Done or Err then sees it cancelled.
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

func (c *opContext) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *opContext) Done() <-chan struct{} { return c.timedCtx().Done() }

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

// Value implements context.Context, answering from the deadline context
// once it exists, so that context.Cause sees it.
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
