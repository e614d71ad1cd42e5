package firestorelock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
	"github.com/idemkit/idemkit/lock/firestorelock/firestoretest"
)

// contenders is how many nodes (lockers with clients of their own) and
// goroutines per node race in the contention tests: small, because every
// conflict between transactions costs the emulator seconds.
const (
	nodes        = 3
	perNode      = 3
	raceDeadline = 3 * time.Minute // against hangs only
)

// race makes every goroutine of every locker try Acquire(key) once, all
// released at the same instant, and returns the leases granted; it fails
// the test on any error: losing is a result.
func race(t *testing.T, lockers []*firestorelock.Locker, key string) []lock.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), raceDeadline)
	defer cancel()
	var (
		mu     sync.Mutex
		leases []lock.Lease
		losers int
		wg     sync.WaitGroup
		start  = make(chan struct{})
		errs   = make(chan error, len(lockers)*perNode)
	)
	for _, l := range lockers {
		for range perNode {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				lease, ok, err := l.Acquire(ctx, key, time.Hour)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if ok {
					leases = append(leases, lease)
				} else {
					losers++
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a contender got an error, not a result: %v", err)
	}
	if len(leases)+losers != len(lockers)*perNode {
		t.Fatalf("%d winners and %d losers of %d contenders", len(leases), losers, len(lockers)*perNode)
	}
	return leases
}

// TestContentionFreeKey races nodes with separate clients on a free key,
// several rounds: exactly one wins each round (the write-only Create lets
// the others fail fast), the others see "locked", and fences follow one
// another.
func TestContentionFreeKey(t *testing.T) {
	t.Parallel()
	p := firestoretest.Project(t)
	var lockers []*firestorelock.Locker
	for range nodes {
		lockers = append(lockers, newLocker(t, p))
	}
	for round := 1; round <= 3; round++ {
		leases := race(t, lockers, "hot")
		if len(leases) != 1 {
			t.Fatalf("round %d: %d holders; want exactly 1", round, len(leases))
		}
		if leases[0].Fence != lock.Fence(round) {
			t.Fatalf("round %d: fence %v; want %d", round, leases[0].Fence, round)
		}
		if out, err := lockers[round%nodes].Release(t.Context(), leases[0].ID); err != nil || !out.OK {
			t.Fatalf("round %d: release = %+v, %v", round, out, err)
		}
	}
}

// TestContentionExpiredKey races nodes with separate clients on a key
// whose lease has expired, which each replaces in a read-write
// transaction: exactly one wins, the others see "locked" (whether their
// transaction found the new lease or ran out of retries), and the fence
// moves by one.
func TestContentionExpiredKey(t *testing.T) {
	t.Parallel()
	p := firestoretest.Project(t)
	clock := fakeclock.New()
	var lockers []*firestorelock.Locker
	for range nodes {
		lockers = append(lockers, fakeLocker(t, p, clock))
	}
	for round := 1; round <= 2; round++ {
		first := acquireOK(t, lockers[0], "hot", time.Second)
		clock.Advance(2 * time.Second)
		leases := race(t, lockers, "hot")
		if len(leases) != 1 {
			t.Fatalf("round %d: %d holders; want exactly 1", round, len(leases))
		}
		if leases[0].Fence != first.Fence+1 {
			t.Fatalf("round %d: fence %v; want %v", round, leases[0].Fence, first.Fence+1)
		}
		clock.Advance(2 * time.Hour) // let the winner's lease expire too
	}
}
