package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/redis/go-redis/v9"
)

// roundTrips counts what a client sends: round trips (a command alone
// or a pipeline) and the commands in them.
type roundTrips struct {
	trips, cmds atomic.Int64
}

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.trips.Add(1)
		r.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.trips.Add(1)
		r.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// hookedLocker starts a server for the test alone and returns it with a
// locker (of opts) on a client of it that has hook.
func hookedLocker(t *testing.T, hook redis.Hook, opts ...redislock.Option) (*testenv.RedisServer, *redislock.Locker) {
	t.Helper()
	srv := testenv.NewRedis(t)
	c := clientFor(t, srv.Addr)
	c.AddHook(hook)
	return srv, newLocker(t, c, opts...)
}

// dials counts the connections a client opens.
type dials struct {
	roundTrips
	n atomic.Int64
}

func (d *dials) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d.n.Add(1)
		return next(ctx, network, addr)
	}
}

// TestLoneCallerKeepsToOneConnection: acquires and releases that come one
// at a time all go on one connection of the client: the release's single
// command as well as the acquire's pipeline (go-redis keeps pipelines on
// connections of their own), and the EVAL that gives the server a script
// it does not have yet. 50 cycles, by key and by id, open one connection,
// not one for the acquires and one for the releases.
func TestLoneCallerKeepsToOneConnection(t *testing.T) {
	t.Parallel()
	var d dials
	_, l := hookedLocker(t, &d)
	ctx := t.Context()
	for i := range 50 {
		lease, ok, err := l.Acquire(ctx, fmt.Sprint("k", i), time.Minute)
		if err != nil || !ok {
			t.Fatalf("Acquire: %v, %v", ok, err)
		}
		if i%2 == 0 {
			_, err = l.ReleaseKey(ctx, lease.Key, lease.ID)
		} else {
			_, err = l.Release(ctx, lease.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := d.n.Load(); n != 1 {
		t.Fatalf("50 acquire + release cycles opened %d connections; want 1", n)
	}
}

// TestBusyLockerSharesRoundTrips: once WithMaxInflight round trips are in
// flight, the commands of further acquires and releases queue and go
// together in the next round trip, and each call still gets its own
// answer. With the server frozen while one acquire is in flight, 31 more
// queue; one of them is cancelled, returns at once and is never sent; the
// other 30 go in a single pipeline when the first comes back, and each
// gets its own lease. Their releases, queued the same way, share one
// round trip too.
func TestBusyLockerSharesRoundTrips(t *testing.T) {
	t.Parallel()
	var rt roundTrips
	srv, l := hookedLocker(t, &rt, redislock.WithMaxInflight(1))
	ctx := t.Context()
	// The connections and the release script are ready before counting.
	warm, ok, err := l.Acquire(ctx, "warm-up", time.Minute)
	if err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	if _, err := l.ReleaseKey(ctx, warm.Key, warm.ID); err != nil {
		t.Fatal(err)
	}

	const calls = 32
	type result struct {
		lease lock.Lease
		ok    bool
		err   error
	}
	// crowd runs calls-1 more calls of f while the first is in flight on
	// the frozen server, one of them (the last) under a ctx it cancels
	// once all are queued; it returns their results, by call.
	crowd := func(what string, f func(ctx context.Context, i int) result) []result {
		t.Helper()
		rt.trips.Store(0)
		rt.cmds.Store(0)
		resume := srv.Stall(t)
		defer resume()
		results := make([]result, calls-1)
		var wg sync.WaitGroup
		run := func(i int) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = f(ctx, i)
			}()
		}
		run(0)
		eventually(t, what+": the first in flight", func() bool { s, _ := redislock.Inflight(l); return s == 1 })
		for i := 1; i < calls-1; i++ {
			run(i)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancelled := make(chan error, 1)
		go func() { cancelled <- f(cctx, calls-1).err }()
		eventually(t, what+": the others queued", func() bool { _, q := redislock.Inflight(l); return q == calls-1 })
		cancel()
		select {
		case err := <-cancelled:
			if !errors.Is(err, context.Canceled) || idemkit.CodeOf(err) != idemkit.CodeAborted {
				t.Fatalf("%s: the cancelled call: %v; want Aborted wrapping context.Canceled", what, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the cancelled call did not return while the server was frozen", what)
		}
		resume()
		wg.Wait()
		return results
	}

	leases := crowd("acquires", func(ctx context.Context, i int) result {
		lease, ok, err := l.Acquire(ctx, fmt.Sprint("k", i), time.Minute)
		return result{lease, ok, err}
	})
	for i, r := range leases {
		if r.err != nil || !r.ok || r.lease.Key != fmt.Sprint("k", i) || r.lease.Fence == 0 {
			t.Fatalf("acquire %d: %+v, %v, %v; want a lease of k%d", i, r.lease, r.ok, r.err, i)
		}
	}
	// The first acquire alone, then the other 30 in one pipeline: two
	// commands each.
	if trips, cmds := rt.trips.Load(), rt.cmds.Load(); trips != 2 || cmds != 2*(calls-1) {
		t.Fatalf("%d acquires took %d round trips with %d commands; want 2 with %d", calls-1, trips, cmds, 2*(calls-1))
	}
	if locked, err := l.IsLocked(ctx, fmt.Sprint("k", calls-1)); err != nil || locked {
		t.Fatalf("the key of the cancelled acquire: locked %v, %v; want free (nothing sent)", locked, err)
	}

	released := crowd("releases", func(ctx context.Context, i int) result {
		if i == calls-1 {
			_, err := l.ReleaseKey(ctx, "k0", "AAAAAAAAAAAAAAAAAAAAAA")
			return result{err: err}
		}
		out, err := l.ReleaseKey(ctx, leases[i].lease.Key, leases[i].lease.ID)
		return result{ok: out.OK, err: err}
	})
	for i, r := range released {
		if r.err != nil || !r.ok {
			t.Fatalf("release %d: %v, %v; want released", i, r.ok, r.err)
		}
		if locked, err := l.IsLocked(ctx, fmt.Sprint("k", i)); err != nil || locked {
			t.Fatalf("k%d after its release: locked %v, %v", i, locked, err)
		}
	}
}

// TestBusyLockerFrozenServer: with every round trip in flight on a
// frozen server, queued calls end with their own ctx deadlines, and the
// Locker serves again once the server is back.
func TestBusyLockerFrozenServer(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedis(t)
	l := newLocker(t, clientFor(t, srv.Addr), redislock.WithMaxInflight(2))
	ctx := t.Context()
	if _, ok, err := l.Acquire(ctx, "warm-up", time.Minute); err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	resume := srv.Stall(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, _, err := l.Acquire(cctx, fmt.Sprint("frozen", i), time.Minute)
			errs <- err
		}()
	}
	wg.Wait()
	resume()
	close(errs)
	for err := range errs {
		if idemkit.CodeOf(err) != idemkit.CodeNetworkTimeout {
			t.Fatalf("an acquire on the frozen server: %v; want NetworkTimeout by its deadline", err)
		}
	}
	eventually(t, "the Locker serves again", func() bool {
		_, ok, err := l.Acquire(ctx, fmt.Sprint("after", time.Now().UnixNano()), time.Minute)
		return err == nil && ok
	})
}

// TestMaxInflightRefusesNegative: a negative WithMaxInflight is an
// InvalidArgument error of New.
func TestMaxInflightRefusesNegative(t *testing.T) {
	t.Parallel()
	_, err := redislock.New(clientFor(t, testenv.Redis(t).Addr), redislock.WithMaxInflight(-1))
	if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("New with WithMaxInflight(-1): %v; want InvalidArgument", err)
	}
}
