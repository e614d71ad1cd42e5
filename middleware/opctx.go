package middleware

import (
	"context"
	"sync"
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
// clock, Value from the parent.
type opContext struct {
	parent   context.Context
	deadline time.Time

	once   sync.Once
	timed  atomic.Pointer[timedContext] // set once, by Done, AfterFunc or release
	closed atomic.Bool                  // released: the call is over
}

type timedContext struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// withOpTimeout returns a context bounded by d (or parent's earlier
// deadline) and the function that releases it.
func withOpTimeout(parent context.Context, d time.Duration) (*opContext, func()) {
	c := &opContext{parent: parent, deadline: time.Now().Add(d)}
	if pd, ok := parent.Deadline(); ok && pd.Before(c.deadline) {
		c.deadline = pd
	}
	return c, c.release
}

// timedCtx returns the deadline context, creating it on first use.
func (c *opContext) timedCtx() context.Context {
	c.once.Do(func() {
		ctx, cancel := context.WithDeadline(c.parent, c.deadline)
		c.timed.Store(&timedContext{ctx: ctx, cancel: cancel})
	})
	return c.timed.Load().ctx
}

// release ends the context: a deadline context that exists is cancelled;
// otherwise none is created, and a late Done or Err sees a cancelled one.
func (c *opContext) release() {
	c.closed.Store(true)
	c.once.Do(func() { c.timed.Store(&timedContext{ctx: cancelled, cancel: func() {}}) })
	c.timed.Load().cancel()
}

// cancelled is a context that is already cancelled.
var cancelled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// Deadline implements context.Context.
func (c *opContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Done implements context.Context.
func (c *opContext) Done() <-chan struct{} { return c.timedCtx().Done() }

// Err implements context.Context.
func (c *opContext) Err() error {
	if t := c.timed.Load(); t != nil {
		return t.ctx.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if c.closed.Load() {
		return context.Canceled
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
	return c.parent.Value(key)
}

// AfterFunc lets contexts derived from this one follow it without a
// goroutine of their own (context.WithCancel looks for this method).
func (c *opContext) AfterFunc(f func()) (stop func() bool) {
	return context.AfterFunc(c.timedCtx(), f)
}
