package idemkit_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

func TestBackoff(t *testing.T) {
	b := idemkit.Backoff{Base: 10 * time.Millisecond, Max: 70 * time.Millisecond}
	if !b.Valid() || (idemkit.Backoff{Base: 2, Max: 1}).Valid() || (idemkit.Backoff{}).Valid() {
		t.Fatal("Valid")
	}
	// Delay(n) lies in [d/2, d] for the nominal d = min(Base·2^(n−1), Max),
	// and is jittered: 500 draws give more than one value.
	for n, d := range map[int]time.Duration{0: 10, 1: 10, 2: 20, 3: 40, 4: 70, 5: 70, 60: 70} {
		d *= time.Millisecond
		seen := map[time.Duration]bool{}
		for range 500 {
			got := b.Delay(n)
			if got < d/2 || got > d {
				t.Fatalf("Delay(%d) = %v; want within [%v, %v]", n, got, d/2, d)
			}
			seen[got] = true
		}
		if len(seen) < 2 {
			t.Fatalf("Delay(%d) returned one value in 500 draws: no jitter", n)
		}
	}
	// A delay too short to halve is returned as it is.
	if got := (idemkit.Backoff{Base: 1, Max: 1}).Delay(3); got != 1 {
		t.Fatalf("Delay of a 1ns back-off = %v", got)
	}
}
