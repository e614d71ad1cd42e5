package pglock

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
)

// granted is one lease as its holder saw it: the fence, the server's
// acquired-at, and the latest expiry that an acquire or a successful extend
// returned.
type granted struct {
	fence    idemkit.Fence
	acquired time.Time
	until    time.Time
	extends  int
}

// TestAcquireExtendRace races extends against acquires at the expiry
// boundary. Holders extend their leases right around the instant they run out while
// other goroutines hammer Acquire on the same keys; nothing is ever
// released, so a lease ends only by expiry. For every key, the leases in
// fence order must never overlap: each one is granted at or after the last
// expiry its predecessor's holder was promised by an extend that returned
// OK, and fences grow with each grant.
func TestAcquireExtendRace(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opts := tables(t, admin)
	l, err := New(newPool(t, srv.URL, 16), opts...)
	if err != nil {
		t.Fatal(err)
	}
	const (
		keys      = 4
		perKey    = 4 // goroutines per key
		leases    = 25
		ttl       = 40 * time.Millisecond
		maxExtend = 3
	)
	ctx := t.Context()
	guard := time.Now().Add(2 * time.Minute) // against hangs only
	var (
		mu                 sync.Mutex
		byKey              = make(map[string][]*granted)
		extendOK, extendNo atomic.Int32
		failures           = make(chan error, keys*perKey)
		wg                 sync.WaitGroup
	)
	count := func(k string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(byKey[k])
	}
	for i := range keys {
		k := fmt.Sprintf("race/%d", i)
		for range perKey {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for count(k) < leases && time.Now().Before(guard) {
					lease, ok, err := l.Acquire(ctx, k, ttl)
					if err != nil {
						failures <- fmt.Errorf("acquire: %w", err)
						return
					}
					if !ok {
						time.Sleep(time.Duration(rand.N(500)) * time.Microsecond)
						continue
					}
					g := &granted{fence: lease.Fence, acquired: lease.AcquiredAt, until: lease.ExpiresAt}
					mu.Lock()
					byKey[k] = append(byKey[k], g)
					mu.Unlock()
					// Extend right around the expiry: a little before, at,
					// or a little after it, while the others acquire.
					for range rand.N(maxExtend + 1) {
						jitter := time.Duration(rand.N(3000)-1500) * time.Microsecond
						time.Sleep(time.Until(g.until) + jitter)
						out, err := l.Extend(ctx, lease.ID, ttl)
						if err != nil {
							failures <- fmt.Errorf("extend: %w", err)
							return
						}
						if !out.OK {
							extendNo.Add(1)
							break
						}
						extendOK.Add(1)
						mu.Lock()
						g.until, g.extends = out.ExpiresAt, g.extends+1
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Fatal(err)
	}
	for k, gs := range byKey {
		slices.SortFunc(gs, func(a, b *granted) int { return a.fence.Compare(b.fence) })
		for i := 1; i < len(gs); i++ {
			prev, next := gs[i-1], gs[i]
			if next.fence <= prev.fence {
				t.Fatalf("%s: fence %v follows %v; want growing fences", k, next.fence, prev.fence)
			}
			if next.acquired.Before(prev.until) {
				t.Fatalf("%s: lease %v was granted at %v, before lease %v (extended %d times) ran out at %v: two holders at once",
					k, next.fence, next.acquired.Format(time.RFC3339Nano), prev.fence, prev.extends, prev.until.Format(time.RFC3339Nano))
			}
		}
		if len(gs) < leases {
			t.Fatalf("%s: only %d leases before the guard ran out", k, len(gs))
		}
	}
	t.Logf("%d leases on %d keys; %d extends succeeded, %d found the lease gone", keys*leases, keys, extendOK.Load(), extendNo.Load())
}
