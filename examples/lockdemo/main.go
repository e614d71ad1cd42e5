// Command lockdemo walks through idemkit's lock layer on the in-memory
// backend: two workers contending for one lock, the fence growing with every
// holder, renewal keeping a slow job's lease alive past its TTL, and a stale
// holder fenced out by the resource it writes to.
//
//	go run ./lockdemo
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/store/memstore"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "lockdemo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer) error {
	start := time.Now()
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "  %6.0fms  %s\n", float64(time.Since(start).Microseconds())/1000, fmt.Sprintf(format, args...))
	}
	title := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(w, s)
	}
	var extends atomic.Int32
	// The lock library runs over any store engine; memstore is the one in
	// memory.
	client, err := lock.New(memstore.New())
	if err != nil {
		return err
	}
	locker, err := lock.WithTelemetry(client, lock.ReporterFunc(func(r lock.Report) {
		if r.Op == "extend" && r.OK {
			extends.Add(1)
		}
	}))
	if err != nil {
		return err
	}

	title("idemkit lock demo (in-memory backend)\n")
	title("1. Two workers contend for \"report:daily\"")
	var wg sync.WaitGroup
	aHolds := make(chan struct{})
	for _, w := range []string{"A", "B"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w == "B" {
				<-aHolds // let A win, so the story reads the same every time
				say("worker B tries; the lock is held, so it waits")
			}
			err := lock.Do(ctx, locker, "report:daily", func(ctx context.Context, lease lock.Lease) error {
				say("worker %s holds the lock   fence %s", w, lease.Fence)
				if w == "A" {
					close(aHolds)
					time.Sleep(150 * time.Millisecond) // the work
					say("worker A is done and releases")
				}
				return nil
			})
			if err != nil {
				say("worker %s: %v", w, err)
			}
		}()
	}
	wg.Wait()
	say("worker B woke on the release, not on a polling timer")

	title("\n2. The fence grows with every holder, and never goes back")
	say("(a fence is above every fence the store issued before, and at least the clock in Unix ms: no counter per key is kept)")
	for range 3 {
		h, _, err := lock.Acquire(ctx, locker, "report:daily", time.Second)
		if err != nil {
			return err
		}
		say("holder gets fence %s (as a number: %d)", h.Lease().Fence, h.Lease().Fence.Uint64())
		h.Close()
	}

	title("\n3. Renewal keeps a slow job's lock: TTL 300ms, job 1s")
	intruderRefused := 0
	err = lock.Do(ctx, locker, "job:reindex", func(ctx context.Context, lease lock.Lease) error {
		say("job starts, fence %s, lease expires in 300ms unless renewed", lease.Fence)
		for i := range 5 {
			time.Sleep(200 * time.Millisecond)
			intruder := "refused"
			if _, ok, _ := locker.Acquire(ctx, "job:reindex", time.Second); ok {
				intruder = "GRANTED: the lease was lost"
			} else {
				intruderRefused++
			}
			say("job at %dms: lease renewed %d times so far; an intruder's acquire: %s", (i+1)*200, extends.Load(), intruder)
		}
		return ctx.Err()
	}, lock.WithTTL(300*time.Millisecond))
	if err != nil {
		return err
	}
	say("job finished holding its lock throughout (%d renewals, %d intruders refused)", extends.Load(), intruderRefused)

	title("\n4. Fencing: a stale holder is refused by the resource")
	store := &fencedStore{}
	stale, _, err := locker.Acquire(ctx, "account:7", 100*time.Millisecond)
	if err != nil {
		return err
	}
	say("holder 1 takes the lock, fence %s, and stalls (a GC pause, a network partition)", stale.Fence)
	time.Sleep(150 * time.Millisecond)
	fresh, ok, err := locker.Acquire(ctx, "account:7", time.Second)
	if err != nil || !ok {
		return fmt.Errorf("the expired lock was not taken over: %v", err)
	}
	say("its lease runs out; holder 2 takes over with fence %s", fresh.Fence)
	say("holder 2 writes:  %v", result(store.write(fresh.Fence, "balance=90")))
	say("holder 1 resumes and writes with its old fence: %v", result(store.write(stale.Fence, "balance=100")))
	out, _ := locker.Release(ctx, stale.ID)
	say("holder 1 cannot release the new holder's lock either: released=%v (expired: %v)", out.OK, out.Expired)
	say("the resource holds %q", store.value)
	return nil
}

// fencedStore is a resource that remembers the highest fence it has seen
// and refuses writes carrying an older one.
type fencedStore struct {
	mu    sync.Mutex
	fence idemkit.Fence
	value string
}

var errStaleFence = errors.New("refused: stale fence")

func (s *fencedStore) write(f idemkit.Fence, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f < s.fence {
		return fmt.Errorf("%w %s < %s", errStaleFence, f, s.fence)
	}
	s.fence, s.value = f, v
	return nil
}

func result(err error) string {
	if err != nil {
		return err.Error()
	}
	return "accepted"
}
