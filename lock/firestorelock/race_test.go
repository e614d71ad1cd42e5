package firestorelock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
)

// contenders is how many nodes (lockers with clients of their own) and
// goroutines per node race in the contention tests: small, because every
// conflict between transactions costs the emulator seconds.
const (
	nodes        = 3
	perNode      = 3
	raceDeadline = time.Minute // against hangs only
)

// race makes every goroutine of every locker try Acquire(key) once, all
// released at the same instant, and returns the leases granted; it fails
// the test on any error: losing is a result.
func race(t *testing.T, lockers []*firestorelock.Locker, key string, ttl time.Duration) []lock.Lease {
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
				lease, ok, err := l.Acquire(ctx, key, ttl)
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

func lockers(t *testing.T, p string) []*firestorelock.Locker {
	var ls []*firestorelock.Locker
	for range nodes {
		ls = append(ls, newLocker(t, p))
	}
	return ls
}

// TestContentionFreeKey races nodes with separate clients on a free key,
// several rounds: exactly one wins each round (the write-only Create lets
// the others fail fast), the others see "locked", and fences grow from
// round to round.
func TestContentionFreeKey(t *testing.T) {
	t.Parallel()
	ls := lockers(t, project(t))
	var prev idemkit.Fence
	for round := 1; round <= 3; round++ {
		leases := race(t, ls, "hot", time.Hour)
		if len(leases) != 1 {
			t.Fatalf("round %d: %d holders; want exactly 1", round, len(leases))
		}
		if leases[0].Fence <= prev {
			t.Fatalf("round %d: fence %v after %v; want greater", round, leases[0].Fence, prev)
		}
		prev = leases[0].Fence
		if out, err := ls[round%nodes].Release(t.Context(), leases[0].ID); err != nil || !out.OK {
			t.Fatalf("round %d: release = %+v, %v", round, out, err)
		}
	}
}

// TestContentionExpiredKey races nodes with separate clients on a key
// whose lease has expired, which each replaces in a read-write
// transaction: exactly one wins, the others see "locked" (whether their
// transaction found the new lease or ran out of retries), and the fence
// grows.
func TestContentionExpiredKey(t *testing.T) {
	t.Parallel()
	ls := lockers(t, project(t))
	first := acquireOK(t, ls[0], "hot", margin)
	outlive(first.ExpiresAt)
	leases := race(t, ls, "hot", time.Hour)
	if len(leases) != 1 {
		t.Fatalf("%d holders; want exactly 1", len(leases))
	}
	if leases[0].Fence <= first.Fence {
		t.Fatalf("fence %v; want above %v", leases[0].Fence, first.Fence)
	}
}

// TestContentionTombstone races nodes on a key whose fence a tombstone
// carries ahead of the clock: exactly one wins with the next fence (the
// conditional update lets the others fail fast).
func TestContentionTombstone(t *testing.T) {
	t.Parallel()
	p := project(t)
	ls := lockers(t, p)
	ahead := idemkit.Fence(time.Now().Add(24 * time.Hour).UnixMilli())
	if err := newProbes(t, p, ls[0]).raiseFence(t.Context(), "hot", ahead); err != nil {
		t.Fatal(err)
	}
	leases := race(t, ls, "hot", time.Hour)
	if len(leases) != 1 || leases[0].Fence != ahead+1 {
		t.Fatalf("%d holders (%v); want exactly 1 with fence %v", len(leases), leases, ahead+1)
	}
}
