package lock

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// TestDelays checks the back-off schedule of Do: exponential base·2^(n−1)
// or fixed, capped, and the jitter ranges (equal: [d/2, d), full: [0, d),
// none: d), by sampling the random source at its extremes and at random.
func TestDelays(t *testing.T) {
	const base = 100 * time.Millisecond
	cases := []struct {
		name    string
		backoff Backoff
		n       int
		want    time.Duration // before jitter
	}{
		{"exp 1", BackoffExponential, 1, base},
		{"exp 2", BackoffExponential, 2, 2 * base},
		{"exp 4", BackoffExponential, 4, 8 * base},
		{"exp capped", BackoffExponential, 6, time.Second},
		{"exp far past the cap", BackoffExponential, 500, time.Second},
		{"fixed 1", BackoffFixed, 1, base},
		{"fixed 9", BackoffFixed, 9, base},
	}
	for _, c := range cases {
		for _, j := range []struct {
			jitter Jitter
			lo, hi func(d time.Duration) time.Duration // [lo, hi)
		}{
			{JitterNone, func(d time.Duration) time.Duration { return d }, func(d time.Duration) time.Duration { return d + 1 }},
			{JitterEqual, func(d time.Duration) time.Duration { return d / 2 }, func(d time.Duration) time.Duration { return d }},
			{JitterFull, func(time.Duration) time.Duration { return 0 }, func(d time.Duration) time.Duration { return d }},
			{JitterAdd, func(d time.Duration) time.Duration { return d }, func(d time.Duration) time.Duration { return d + base }},
		} {
			for _, r := range []float64{0, 0.5, 0.999999} {
				cfg := defaultConfig()
				cfg.retryDelay, cfg.maxDelay, cfg.backoff, cfg.jitter = base, time.Second, c.backoff, j.jitter
				cfg.random = func() float64 { return r }
				got := cfg.delay(c.n)
				if got < j.lo(c.want) || got >= j.hi(c.want) {
					t.Fatalf("%s, jitter %d, random %v: delay %v outside [%v, %v)", c.name, j.jitter, r, got, j.lo(c.want), j.hi(c.want))
				}
			}
		}
	}
	// With the real random source, equal jitter spreads over its range.
	cfg := defaultConfig()
	lo, hi := time.Hour, time.Duration(0)
	for range 2000 {
		d := cfg.delay(1)
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < DefaultRetryDelay/2 || hi >= DefaultRetryDelay || hi-lo < DefaultRetryDelay/4 {
		t.Fatalf("equal jitter over 2000 draws spans [%v, %v]", lo, hi)
	}
}

func TestDoOptionValidation(t *testing.T) {
	bad := []Option{
		WithTTL(0), WithTTL(time.Microsecond), WithRetryDelay(0), WithMaxDelay(-1), WithTimeout(-1),
		WithMaxRetries(-1), WithReleaseTimeout(0), WithBackoff(9), WithJitter(9),
		func(c *doConfig) { c.ttl, c.renewEvery = time.Second, time.Second },
	}
	for i, o := range bad {
		cfg := defaultConfig()
		o(&cfg)
		if err := cfg.validate(); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("option %d: validate = %v; want InvalidArgument", i, err)
		}
	}
	cfg := defaultConfig()
	if err := cfg.validate(); err != nil || cfg.renewEvery != DefaultTTL/3 {
		t.Fatalf("defaults: %v, renew every %v", err, cfg.renewEvery)
	}
}
