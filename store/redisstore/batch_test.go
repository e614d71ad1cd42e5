package redisstore_test

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
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// traffic counts what a client sends for the store (round trips of the
// store's scripts: a command alone or a pipeline; the scripts in them;
// not the set-up of a new connection) and the connections it opens.
type traffic struct {
	trips, cmds, dials atomic.Int64
}

func (r *traffic) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		r.dials.Add(1)
		return next(ctx, network, addr)
	}
}

func (r *traffic) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (r *traffic) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.count(cmds)
		return next(ctx, cmds)
	}
}

// count counts the store's operations among cmds: a script, or a
// transaction (its EXEC).
func (r *traffic) count(cmds []redis.Cmder) {
	n := 0
	for _, c := range cmds {
		if c.Name() == "evalsha" || c.Name() == "eval" || c.Name() == "exec" {
			n++
		}
	}
	if n > 0 {
		r.trips.Add(1)
		r.cmds.Add(int64(n))
	}
}

// TestLoneCallerKeepsToOneConnection: claims, completions and releases
// that come one at a time all go on one connection of the client, the
// EVAL that gives the server the script included: 50 cycles open one
// connection.
func TestLoneCallerKeepsToOneConnection(t *testing.T) {
	t.Parallel()
	var tr traffic
	c := nodeClient(t, testenv.NewRedis(t).Addr)
	c.AddHook(&tr)
	s, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for i := range 50 {
		k := fmt.Sprint("k", i)
		rec, ok, err := s.Claim(ctx, k, "fp", time.Minute)
		if err != nil || !ok {
			t.Fatalf("Claim: %v, %v", ok, err)
		}
		if i%2 == 0 {
			ok, err = s.Release(ctx, k, rec.Fence)
		} else {
			rec.State = store.StateCompleted
			ok, err = s.Complete(ctx, rec, time.Minute)
		}
		if err != nil || !ok {
			t.Fatalf("cycle %d: %v, %v", i, ok, err)
		}
	}
	if n := tr.dials.Load(); n != 1 {
		t.Fatalf("50 cycles opened %d connections; want 1", n)
	}
}

// TestBusyStoreSharesRoundTrips: once its round trips in flight reach the
// limit, the store's further calls queue and go together in the next
// round trip, and each gets its own answer. With the server frozen while
// the limit's calls are in flight, 31 more queue; one is cancelled,
// returns at once and is never sent; the other 30 go in a single pipeline
// when a round trip comes back, and each gets its own claim.
func TestBusyStoreSharesRoundTrips(t *testing.T) {
	t.Parallel()
	var tr traffic
	srv := testenv.NewRedis(t)
	c := nodeClient(t, srv.Addr)
	s := newStore(t, c)
	c.AddHook(&tr)
	ctx := t.Context()
	resume := srv.Stall(t)
	defer resume()

	const queued = 31
	type result struct {
		rec store.Record
		ok  bool
		err error
	}
	results := make([]result, redisstore.MaxInflight+queued)
	var wg sync.WaitGroup
	claim := func(ctx context.Context, i int) {
		wg.Go(func() {
			rec, ok, err := s.Claim(ctx, fmt.Sprint("k", i), "fp", time.Minute)
			results[i] = result{rec, ok, err}
		})
	}
	for i := range redisstore.MaxInflight {
		claim(ctx, i)
	}
	eventually(t, "the limit's round trips in flight", func() bool { n, _ := redisstore.Inflight(s); return n == redisstore.MaxInflight })
	for i := range queued - 1 {
		claim(ctx, redisstore.MaxInflight+i)
	}
	last := redisstore.MaxInflight + queued - 1
	cctx, cancel := context.WithCancel(ctx)
	cancelled := make(chan error, 1)
	go func() { _, _, err := s.Claim(cctx, fmt.Sprint("k", last), "fp", time.Minute); cancelled <- err }()
	eventually(t, "the others queued", func() bool { _, q := redisstore.Inflight(s); return q == queued })
	cancel()
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) || idemkit.CodeOf(err) != idemkit.CodeAborted {
			t.Fatalf("the cancelled call: %v; want Aborted wrapping context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled call did not return while the server was frozen")
	}
	resume()
	wg.Wait()
	for i, r := range results[:last] {
		if r.err != nil || !r.ok || r.rec.Key != fmt.Sprint("k", i) || r.rec.Fence == 0 {
			t.Fatalf("claim %d: %+v, %v, %v; want a claim of k%d", i, r.rec, r.ok, r.err, i)
		}
	}
	// The limit's calls one round trip each, then the other 30 in one.
	if trips, cmds := tr.trips.Load(), tr.cmds.Load(); trips != redisstore.MaxInflight+1 || cmds != int64(last) {
		t.Fatalf("%d claims took %d round trips with %d commands; want %d with %d", last, trips, cmds, redisstore.MaxInflight+1, last)
	}
	if _, ok, err := s.Get(ctx, fmt.Sprint("k", last)); err != nil || ok {
		t.Fatalf("the key of the cancelled claim: %v, %v; want free (nothing sent)", ok, err)
	}
}

// TestBusyStoreFrozenServer: with every round trip in flight on a frozen
// server, queued calls end with their own ctx deadlines, and the store
// serves again once the server is back.
func TestBusyStoreFrozenServer(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedis(t)
	s := newStore(t, nodeClient(t, srv.Addr))
	ctx := t.Context()
	resume := srv.Stall(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, _, err := s.Claim(cctx, fmt.Sprint("frozen", i), "fp", time.Minute)
			errs <- err
		})
	}
	wg.Wait()
	resume()
	close(errs)
	for err := range errs {
		if idemkit.CodeOf(err) != idemkit.CodeNetworkTimeout {
			t.Fatalf("a claim on the frozen server: %v; want NetworkTimeout by its deadline", err)
		}
	}
	eventually(t, "the store serves again", func() bool {
		_, ok, err := s.Claim(ctx, fmt.Sprint("after", time.Now().UnixNano()), "fp", time.Minute)
		return err == nil && ok
	})
}
