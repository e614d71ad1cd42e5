package idemkit

import (
	"math/rand/v2"
	"time"
)

// Backoff is the one retry back-off of idemkit: capped exponential growth
// with jitter. The lock library, the guard and both client helpers (HTTP
// and gRPC) use it, so their retries behave alike.
//
// The n-th delay (n ≥ 1) is drawn uniformly from [d/2, d], where d =
// min(Base·2^(n−1), Max) ("equal jitter": never less than half the nominal
// delay, so retries spread out without ever hammering the server).
type Backoff struct {
	Base time.Duration // the first nominal delay; must be positive
	Max  time.Duration // the cap of one nominal delay; at least Base
}

// Valid reports whether b can be used: 0 < Base ≤ Max.
func (b Backoff) Valid() bool { return b.Base > 0 && b.Max >= b.Base }

// Delay returns the n-th delay (n ≥ 1; below 1 counts as 1): uniform in
// [d/2, d] for d = min(Base·2^(n−1), Max).
func (b Backoff) Delay(n int) time.Duration {
	d := b.nominal(n)
	half := d / 2
	if half <= 0 {
		return d
	}
	return half + rand.N(d-half+1)
}

// nominal returns the n-th delay before jitter: min(Base·2^(n−1), Max).
func (b Backoff) nominal(n int) time.Duration {
	d := b.Base
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}
