package redisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/idemkit/idemkit/lock/redislock/redistest"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/middleware/guardtest"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
)

var fp = fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/orders", Body: []byte(`{"amount":1250}`)})

// node is one process's view: a guard on a redisstore and a redislock.
type node struct {
	guard  *middleware.Guard
	store  *redisstore.Store
	locker *redislock.Locker
}

// newNode builds a guard under prefix. Combined, store and locker share
// one client (and the guard folds lock operations into store scripts);
// otherwise each has a client of its own, so they do not combine.
func newNode(t *testing.T, newClient func(testing.TB) redis.UniversalClient, prefix string, combined bool, opts ...middleware.Option) node {
	t.Helper()
	sc := newClient(t)
	lc := sc
	if !combined {
		lc = newClient(t)
	}
	l, err := redislock.New(lc, redislock.WithKeyPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	s, err := redisstore.New(sc, redisstore.WithKeyPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	if s.Combines(l) != combined {
		t.Fatalf("Combines = %v; want %v", s.Combines(l), combined)
	}
	g, err := middleware.New(s, l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return node{guard: g, store: s, locker: l}
}

// raceOpts let duplicates wait (polling with short back-off) until the
// first execution is recorded, so every caller gets the response.
var raceOpts = []middleware.Option{
	middleware.WithWaitBudget(time.Minute), middleware.WithLockRetries(100000),
	middleware.WithBaseDelay(500 * time.Microsecond), middleware.WithMaxDelay(2 * time.Millisecond),
}

// TestExactlyOnceAcrossGuards races 64 goroutines through 4 guards, each
// with its own client and connection pool (as 4 processes would have), on
// one key, 50 times (guardtest.ExactlyOnce): fn runs exactly once per key,
// every caller gets its response, and every guard replays it afterwards.
// On a single node and on a cluster, combined and not.
//
// The duplicates of each round pass through the lock one by one (each reads
// the record under it), two writes each: the single node is a dedicated
// server without fsync, so that the disk does not set the pace (durability
// plays no part in the race; the cluster keeps appendfsync always).
func TestExactlyOnceAcrossGuards(t *testing.T) {
	fast := testenv.NewRedis(t)
	if err := redistest.ClientFor(t, fast.Addr).ConfigSet(t.Context(), "appendfsync", "no").Err(); err != nil {
		t.Fatal(err)
	}
	raceBackends := []redistest.Backend{
		{Name: "single", NewClient: func(t testing.TB) redis.UniversalClient { return redistest.ClientFor(t, fast.Addr) }},
		{Name: "cluster", NewClient: redistest.Cluster},
	}
	for _, b := range raceBackends {
		for _, combined := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/combined=%v", b.Name, combined), func(t *testing.T) {
				t.Parallel()
				prefix := testenv.Name(t)
				guards := make([]*middleware.Guard, 4)
				for i := range guards {
					guards[i] = newNode(t, b.NewClient, prefix, combined, raceOpts...).guard
				}
				guardtest.ExactlyOnce(t, guards, guardtest.Race{Callers: 64, Rounds: 50, KeyPrefix: "race-", Fingerprint: fp})
			})
		}
	}
}

// trips counts what a client sends: round trips (one per command sent on
// its own, one per pipeline) and commands.
type trips struct {
	roundTrips, commands atomic.Int64
}

func (c *trips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.roundTrips.Add(1)
		c.commands.Add(1)
		return next(ctx, cmd)
	}
}

func (c *trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.roundTrips.Add(1)
		c.commands.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func (c *trips) take() (roundTrips, commands int64) {
	return c.roundTrips.Swap(0), c.commands.Swap(0)
}

// TestRoundTrips counts, with a hook on the clients, what a guard sends
// for a first execution and for a replay (a pipeline is one round trip).
// Combined (store and locker on one client): a replay is 1 round trip (the
// record script), a first execution 3 (record script; acquire-and-read
// script; put-and-release script). Not combined: a replay is 1, a first
// execution 5 (read; acquire; read; put; release). On a cluster a
// successful acquire also writes the lock id's index hint, which lives on
// another slot, with a command of its own: one round trip more.
func TestRoundTrips(t *testing.T) {
	for _, b := range redistest.Backends() {
		for _, combined := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/combined=%v", b.Name, combined), func(t *testing.T) {
				wantTrips, wantCmds := int64(5), int64(5)
				if combined {
					wantTrips, wantCmds = 3, 3
				}
				if b.Name == "cluster" {
					wantTrips++
					wantCmds++
				}
				var counter trips
				var clients []redis.UniversalClient
				counted := func(t testing.TB) redis.UniversalClient {
					c := b.NewClient(t)
					c.AddHook(&counter)
					clients = append(clients, c)
					return c
				}
				prefix := testenv.Name(t)
				// The scripts are loaded (a NOSCRIPT fallback costs a trip)
				// on the node of the measured key's slot by a guard in
				// another namespace: same key, same hash tag, same slot.
				warm := newNode(t, b.NewClient, prefix, combined, middleware.WithNamespace("warm-up"))
				n := newNode(t, counted, prefix, combined)
				run := func(g *middleware.Guard) middleware.Outcome {
					t.Helper()
					out, err := g.Execute(t.Context(), "k", fp, func(context.Context) (middleware.Result, error) {
						return middleware.Result{Value: []byte("v")}, nil
					})
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				run(warm.guard)
				run(warm.guard)
				for _, c := range clients { // connect (the handshake is counted too)
					if err := c.Ping(t.Context()).Err(); err != nil {
						t.Fatal(err)
					}
				}
				counter.take()

				if out := run(n.guard); out.Replayed || !out.Recorded {
					t.Fatalf("first execution: %+v", out)
				}
				if trips, cmds := counter.take(); trips != wantTrips || cmds != wantCmds {
					t.Fatalf("first execution: %d round trips, %d commands; want %d, %d", trips, cmds, wantTrips, wantCmds)
				}
				if out := run(n.guard); !out.Replayed {
					t.Fatalf("replay: %+v", out)
				}
				if trips, cmds := counter.take(); trips != 1 || cmds != 1 {
					t.Fatalf("replay: %d round trips, %d commands; want 1, 1", trips, cmds)
				}
				t.Logf("first execution: %d round trips (%d commands); replay: 1 (1)", wantTrips, wantCmds)
			})
		}
	}
}
