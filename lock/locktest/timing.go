package locktest

import (
	"testing"
	"time"
)

func init() {
	register(
		testCase{"ExpiryBoundary", testExpiryBoundary},
	)
}

// testExpiryBoundary checks the one liveness rule at expiry − ε, at expiry
// and at expiry + ε, for every read and write that judges liveness. With an
// injected clock ε is one millisecond and the boundary itself is checked
// exactly; on a real clock ε is the Env's margin.
func testExpiryBoundary(t *testing.T, s *suite) {
	if s.env(t).fake() {
		t.Run("fake-clock", func(t *testing.T) { boundaryFake(t, s) })
		return
	}
	t.Run("real-clock", func(t *testing.T) { boundaryReal(t, s) })
}

// liveness observes the state of a lease through every operation that
// judges it, without changing it: IsLocked, LookupKey, LookupID, a
// contended Acquire.
func liveness(t *testing.T, e *env, k, id string) bool {
	t.Helper()
	locked := isLocked(t, e, k)
	_, byKey := lookupKey(t, e, k)
	_, byID := lookupID(t, e, id)
	if locked != byKey || locked != byID {
		t.Fatalf("operations disagree on liveness: IsLocked %v, LookupKey %v, LookupID %v", locked, byKey, byID)
	}
	return locked
}

func boundaryFake(t *testing.T, s *suite) {
	const ttl = 10 * time.Second
	const eps = time.Millisecond

	// Reads at expiry − ε, expiry and expiry + ε.
	e := s.env(t)
	k := key(t, "reads")
	lease := acquire(t, e, k, ttl)
	e.Advance(ttl - eps)
	if !liveness(t, e, k, lease.ID) {
		t.Fatal("not live at expiry − 1ms")
	}
	refused(t, e, k)
	e.Advance(eps)
	if liveness(t, e, k, lease.ID) {
		t.Fatal("live at the expiry instant; a lease is live only while now < expiry")
	}
	e.Advance(eps)
	if liveness(t, e, k, lease.ID) {
		t.Fatal("live at expiry + 1ms")
	}

	// Writes: extend and release succeed at expiry − ε and fail at expiry.
	for _, op := range []string{"extend", "release"} {
		e := s.env(t)
		k := key(t, op)
		lease := acquire(t, e, k, ttl)
		e.Advance(ttl - eps)
		var ok bool
		if op == "extend" {
			ok = extend(t, e, lease.ID, ttl).OK
		} else {
			ok = release(t, e, lease.ID).OK
		}
		if !ok {
			t.Fatalf("%s failed at expiry − 1ms", op)
		}
		lease = acquire(t, e, key(t, op+"-2"), ttl)
		e.Advance(ttl)
		if op == "extend" {
			ok = extend(t, e, lease.ID, ttl).OK
		} else {
			ok = release(t, e, lease.ID).OK
		}
		if ok {
			t.Fatalf("%s succeeded at the expiry instant", op)
		}
	}

	// Acquire takes over exactly at expiry.
	e = s.env(t)
	k = key(t, "takeover")
	first := acquire(t, e, k, ttl)
	e.Advance(ttl - eps)
	refused(t, e, k)
	e.Advance(eps)
	if second := acquire(t, e, k, ttl); second.Fence <= first.Fence {
		t.Fatalf("takeover fence %v; want above %v", second.Fence, first.Fence)
	}
}

// boundaryReal checks expiry − ε and expiry + ε on a real clock. The lease
// was granted between t0 (before the acquire was sent) and t1 (after it
// returned), so it is certainly live before t0 + ttl and certainly expired
// after t1 + ttl. A check that the scheduler delayed past its window says
// nothing, and the round is tried again.
func boundaryReal(t *testing.T, s *suite) {
	e := s.env(t)
	eps := e.Margin
	ttl := 6 * eps
	for round := 0; ; round++ {
		if round == 5 {
			t.Fatal("the machine was too busy to observe the lease within its margins five times running")
		}
		k := key(t, "round-"+string(rune('a'+round)))
		t0 := time.Now()
		lease := acquire(t, e, k, ttl)
		time.Sleep(time.Until(t0.Add(ttl - eps)))
		live := liveness(t, e, k, lease.ID)
		if time.Now().After(t0.Add(ttl)) {
			continue // the check may have run after the expiry: inconclusive
		}
		if !live {
			t.Fatalf("not live at expiry − %v", eps)
		}
		if out := extend(t, e, lease.ID, ttl); time.Now().Before(t0.Add(ttl)) && !out.OK {
			t.Fatalf("extend failed before expiry: %+v", out)
		}
		break
	}
	k := key(t, "expired")
	lease := acquire(t, e, k, ttl)
	t1 := time.Now()
	time.Sleep(time.Until(t1.Add(ttl + eps)))
	if liveness(t, e, k, lease.ID) {
		t.Fatalf("live at expiry + %v", eps)
	}
	if out := extend(t, e, lease.ID, ttl); out.OK {
		t.Fatalf("extend succeeded after expiry: %+v", out)
	}
	if out := release(t, e, lease.ID); out.OK {
		t.Fatalf("release succeeded after expiry: %+v", out)
	}
	acquire(t, e, k, ttl)
}
