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
	for n, want := range map[int]time.Duration{0: 10, 1: 10, 2: 20, 3: 40, 4: 70, 5: 70, 60: 70} {
		if got := b.Nominal(n); got != want*time.Millisecond {
			t.Fatalf("Nominal(%d) = %v; want %v", n, got, want*time.Millisecond)
		}
	}
	for n := 1; n < 8; n++ {
		d := b.Nominal(n)
		for range 200 {
			if got := b.Delay(n); got < d/2 || got > d {
				t.Fatalf("Delay(%d) = %v; want within [%v, %v]", n, got, d/2, d)
			}
		}
	}
}
