package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit/store"
)

// clockSteps are the steps back the clock case takes: a failover to a
// replica a little behind, and a clock set back by seconds.
var clockSteps = []time.Duration{50 * time.Millisecond, 5 * time.Second}

// RunClock runs the clock case of [Run] alone, on an Env f builds for it:
// for a test that gives the case a server of its own, since a step of the
// clock moves the whole server's and would disturb cases sharing it. Every
// durable engine's test runs it (Env.ShiftClock set).
func RunClock(t *testing.T, f Factory) {
	t.Helper()
	runCase(t, f, clockCase, testClockSteps)
}

const clockCase = "FencesGrowWhenTheClockStepsBack"

// testClockSteps checks that fences keep growing when the backend's clock
// steps back (or a failover lands on a node whose clock is behind) between
// the end of a key's record and its next claim: after a release, a Delete
// of an outcome and an outcome's expiry, each followed by a step back of
// 50 ms and of 5 s, the key's next fence is above its last. A store that
// lets a record's fence go with the record, once its clock has passed the
// fence, hands out a lower one here. An expired outcome that the store kept
// may be live again by the clock set back: it is replayed (no fence handed
// out), and the claim after its Delete is checked instead.
func testClockSteps(t *testing.T, e *Env) {
	if e.ShiftClock == nil {
		t.Skip("the Env cannot move its backend's clock (Env.ShiftClock is nil); every durable engine's test runs this case with storetest.RunClock on a server of its own")
	}
	for _, step := range clockSteps {
		for _, end := range []struct {
			name string
			run  func(t *testing.T, e *Env, k string, step time.Duration) store.Record
		}{
			{"AfterRelease", endByRelease},
			{"AfterDelete", endByDelete},
			{"AfterExpiry", endByExpiry},
		} {
			t.Run(fmt.Sprintf("%s/StepBack%v", end.name, step), func(t *testing.T) {
				k := key(t, "k")
				last := end.run(t, e, k, step)
				if e.Sweep != nil {
					// A sweeper may run when the clock is at its highest.
					if err := e.Sweep(t.Context()); err != nil {
						t.Fatalf("Sweep: %v", err)
					}
				}
				shiftClock(t, e, -step)
				next, claimed := claim(t, e, k, fp, longTTL)
				if !claimed {
					// By the clock set back, an expired outcome that the store
					// kept (for its fence) has not expired yet: a replay
					// hands out no fence. Its Delete must keep the floor.
					if !next.State.Done() || next.Fence != last.Fence {
						t.Fatalf("after the clock stepped back %v, the key's next claim was refused with %+v; want a new claim or the key's last outcome (fence %v)", step, next, last.Fence)
					}
					t.Logf("after the clock stepped back %v the expired outcome is live again; deleting it", step)
					if !del(t, e, k) {
						t.Fatal("Delete of the outcome that is live again reported nothing deleted")
					}
					next = mustClaim(t, e, k, longTTL)
				}
				if next.Fence <= last.Fence {
					t.Fatalf("after the clock stepped back %v, the key's next claim has fence %v, not above its last %v (%d lower)",
						step, next.Fence, last.Fence, int64(last.Fence)-int64(next.Fence))
				}
			})
		}
	}
}

// shiftClock moves the backend's clock by d, and back by -d when the test
// ends.
func shiftClock(t *testing.T, e *Env, d time.Duration) {
	e.ShiftClock(t, d)
	t.Cleanup(func() { e.ShiftClock(t, -d) })
}

// afterFence lets the backend's clock pass a new claim's fence (a Unix
// millisecond, or just above one): the end of a record that left its fence
// behind only until then must come after it.
func afterFence(e *Env) {
	if e.Advance != nil {
		e.Advance(5 * time.Millisecond)
		return
	}
	time.Sleep(5 * time.Millisecond)
}

func endByRelease(t *testing.T, e *Env, k string, _ time.Duration) store.Record {
	c := mustClaim(t, e, k, longTTL)
	afterFence(e)
	if !release(t, e, k, c.Fence) {
		t.Fatal("Release of the live claim refused")
	}
	return c
}

func endByDelete(t *testing.T, e *Env, k string, _ time.Duration) store.Record {
	c := mustClaim(t, e, k, longTTL)
	afterFence(e)
	if !complete(t, e, outcome(c, "x"), longTTL) {
		t.Fatal("Complete of the live claim refused")
	}
	if !del(t, e, k) {
		t.Fatal("Delete of the outcome reported nothing deleted")
	}
	return c
}

// endByExpiry completes with a record TTL of a fifth of the step, so that
// the outcome is gone before the clock has moved past its fence by as
// much as it then steps back.
func endByExpiry(t *testing.T, e *Env, k string, step time.Duration) store.Record {
	c := mustClaim(t, e, k, longTTL)
	ttl := step / 5
	if !complete(t, e, outcome(c, "x"), ttl) {
		t.Fatal("Complete of the live claim refused")
	}
	if e.Advance != nil {
		e.Advance(ttl)
		if _, ok := get(t, e, k); ok {
			t.Fatalf("the outcome is still there %v after it was written with a record TTL of %v", ttl, ttl)
		}
		return c
	}
	time.Sleep(ttl)
	deadline := time.Now().Add(ttl + 10*e.Margin)
	for {
		if _, ok := get(t, e, k); !ok {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the outcome written with a record TTL of %v is still there after %v", ttl, ttl+10*e.Margin)
		}
		time.Sleep(time.Millisecond)
	}
}
