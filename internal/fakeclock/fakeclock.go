// Package fakeclock is an injectable clock for tests: it moves only when
// told to, and is safe for concurrent use.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a fake clock. Its zero value starts at the zero time; use New.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock at a fixed, arbitrary instant.
func New() *Clock {
	return &Clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
