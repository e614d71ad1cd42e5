package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/redis/go-redis/v9"
)

var fp = fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/orders", Body: []byte(`{"amount":1250}`)})

// newGuard returns a guard on a store on c, under the test's key prefix.
func newGuard(t testing.TB, c redis.UniversalClient, opts ...middleware.Option) *middleware.Guard {
	t.Helper()
	g, err := middleware.New(newStore(t, c), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// answer is fn work that answers v and counts its executions.
func answer(runs *atomic.Int32, v string) middleware.Func {
	return func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{Value: []byte(v)}, nil
	}
}

// TestExactlyOnceAcrossGuards races 64 goroutines through 4 guards, each
// with its own client and connection pool (as 4 processes would have), on
// one key, 50 times: fn runs exactly once per key, every caller gets its
// response, and every guard replays it afterwards. On a single node (a
// server of its own without fsync, so that the disk does not set the pace)
// and on the cluster.
func TestExactlyOnceAcrossGuards(t *testing.T) {
	fast := testenv.NewRedis(t)
	if err := nodeClient(t, fast.Addr).ConfigSet(t.Context(), "appendfsync", "no").Err(); err != nil {
		t.Fatal(err)
	}
	for _, b := range []backend{
		{"single", func(t testing.TB) redis.UniversalClient { return nodeClient(t, fast.Addr) }},
		{"cluster", clusterClient},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			guards := make([]*middleware.Guard, 4)
			for i := range guards {
				guards[i] = newGuard(t, b.newClient(t), middleware.WithWaitBudget(time.Minute),
					middleware.WithBackoff(idemkit.Backoff{Base: 500 * time.Microsecond, Max: 2 * time.Millisecond}))
			}
			guardtest.ExactlyOnce(t, guards, guardtest.Race{Callers: 64, Rounds: 50, KeyPrefix: "race-", Fingerprint: fp})
		})
	}
}

// TestRoundTripsThroughGuard counts, with a hook on the client, what a
// guard sends: a first execution is 2 round trips (claim, complete), a
// replay 1 (claim), on a single node and on a cluster, with and without a
// guard hook.
func TestRoundTripsThroughGuard(t *testing.T) {
	for _, b := range backends() {
		for _, hooked := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/hook=%v", b.name, hooked), func(t *testing.T) {
				c := b.newClient(t)
				var events atomic.Int32
				var opts []middleware.Option
				if hooked {
					opts = append(opts, middleware.WithHook(middleware.HookFunc(func(context.Context, middleware.Event) { events.Add(1) })))
				}
				g := newGuard(t, c, opts...)
				if err := c.Ping(t.Context()).Err(); err != nil { // connect first: the handshake is not the guard's
					t.Fatal(err)
				}
				var n counter
				c.AddHook(&n)
				var runs atomic.Int32
				for i := range 3 {
					k := fmt.Sprint("order-", i)
					before := n.count()
					out, err := g.Execute(t.Context(), k, fp, answer(&runs, k))
					if err != nil || out.Replayed || !out.Recorded {
						t.Fatalf("first execution: %+v, %v", out, err)
					}
					if trips := n.count() - before; trips != 2 {
						t.Fatalf("a first execution took %d round trips; want 2", trips)
					}
					before = n.count()
					out, err = g.Execute(t.Context(), k, fp, answer(&runs, "again"))
					if err != nil || !out.Replayed || string(out.Value) != k {
						t.Fatalf("replay: %+v, %v", out, err)
					}
					if trips := n.count() - before; trips != 1 {
						t.Fatalf("a replay took %d round trips; want 1", trips)
					}
				}
				if hooked && events.Load() != 6 {
					t.Fatalf("the guard hook saw %d events; want 6", events.Load())
				}
				t.Logf("first execution: 2 round trips; replay: 1")
			})
		}
	}
}

// TestNoKeyWithoutExpiryThroughGuard runs 1000 guarded requests with
// unique keys, completed, failed (fn error), forgotten and not replayable,
// and then checks on the server that every key left has an expiry.
func TestNoKeyWithoutExpiryThroughGuard(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			c := b.newClient(t)
			g := newGuard(t, c)
			failed := errors.New("fn failed")
			var completed int
			for i := range 1000 {
				fn := func(ctx context.Context) (middleware.Result, error) {
					switch i % 4 {
					case 1:
						return middleware.Result{}, failed
					case 2:
						middleware.DoNotRecord(ctx)
						return middleware.Result{Value: []byte("5xx")}, nil
					case 3:
						return middleware.Result{NotReplayable: true}, nil
					}
					return middleware.Result{Value: []byte("ok")}, nil
				}
				_, err := g.Execute(t.Context(), fmt.Sprint("req-", i), fp, fn)
				if err != nil && !errors.Is(err, failed) {
					t.Fatal(err)
				}
				if i%4 == 0 || i%4 == 3 {
					completed++
				}
			}
			left, err := immortal(t.Context(), c, prefix(t))
			if err != nil {
				t.Fatal(err)
			}
			if len(left) > 0 {
				t.Fatalf("%d keys without expiry after 1000 requests (first: %q)", len(left), left[0])
			}
			n, err := countKeys(t.Context(), c, prefix(t))
			if err != nil {
				t.Fatal(err)
			}
			// Outcomes stay; released claims leave nothing once the clock
			// has passed their fences (it has, by the time fn returned).
			if n < completed || n > 1000 {
				t.Fatalf("%d keys left; want the %d outcomes (and no more than 1000)", n, completed)
			}
			t.Logf("%d keys left, every one with an expiry", n)
		})
	}
}

// TestStaleHolderAcrossStalledLink: guard A's connection to Redis stalls
// while its fn runs, so it cannot extend its lease; the lease runs out, B
// claims the key, runs and completes. When A's link comes back, A's
// completion is refused (another claim wrote the record), A's fn had been
// told its lease was lost, and every replay is B's response.
func TestStaleHolderAcrossStalledLink(t *testing.T) {
	addr := testenv.Redis(t).Addr
	l := newLink(t, addr)
	opts := []middleware.Option{
		middleware.WithLeaseTTL(300 * time.Millisecond), middleware.WithOpTimeout(200 * time.Millisecond),
		middleware.WithRecordWriteTimeout(10 * time.Second), middleware.WithWaitBudget(0),
	}
	var notRecorded atomic.Int32
	a := newGuard(t, nodeClient(t, l.addr(), func(o *redis.Options) { o.MaxRetries = -1 }), append(opts,
		middleware.WithHook(middleware.HookFunc(func(_ context.Context, e middleware.Event) {
			if e.Kind == middleware.EventNotRecorded {
				notRecorded.Add(1)
			}
		})))...)
	b := newGuard(t, nodeClient(t, addr), opts...)

	var runs atomic.Int32
	started, stalledLong := make(chan struct{}), make(chan struct{})
	var lostCause atomic.Value
	type result struct {
		out middleware.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := a.Execute(context.Background(), "order-1", fp, func(ctx context.Context) (middleware.Result, error) {
			runs.Add(1)
			close(started)
			<-stalledLong
			<-ctx.Done()
			lostCause.Store(context.Cause(ctx))
			return middleware.Result{Value: []byte("a")}, nil
		})
		done <- result{out, err}
	}()
	<-started
	l.stall()
	time.Sleep(time.Second) // past A's lease: it could not extend it
	out, err := b.Execute(t.Context(), "order-1", fp, answer(&runs, "b"))
	if err != nil || out.Replayed || !out.Recorded || string(out.Value) != "b" {
		t.Fatalf("B after A's lease ran out: %+v, %v; want B to run and record", out, err)
	}
	close(stalledLong)
	time.Sleep(300 * time.Millisecond) // A's completion fails while the link is down
	l.resume()
	r := <-done
	if r.err != nil || r.out.Recorded || string(r.out.Value) != "a" {
		t.Fatalf("A: %+v, %v; want its outcome not recorded", r.out, r.err)
	}
	if cause, _ := lostCause.Load().(error); !errors.Is(cause, idemkit.ErrLeaseLost) {
		t.Fatalf("A's fn ended with %v; want idemkit.ErrLeaseLost", cause)
	}
	if notRecorded.Load() == 0 {
		t.Fatal("A reported no unrecorded outcome")
	}
	for _, g := range []*middleware.Guard{a, b, a} {
		out, err := g.Execute(t.Context(), "order-1", fp, answer(&runs, "again"))
		if err != nil || !out.Replayed || string(out.Value) != "b" {
			t.Fatalf("a replay after both: %+v, %v; want B's response", out, err)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("fn ran %d times; want 2 (A, whose lease ran out, and B)", n)
	}
}

// TestServerKilledWhileFnRuns: the Redis server dies (SIGKILL) while a
// guarded request holds its claim and runs fn. A duplicate meanwhile is
// told the backend is unavailable and never runs fn. The first request's
// completion fails and is retried; the server comes back with its AOF (the
// claim is still there), the completion lands, even if the lease ran out
// meanwhile, since nobody claimed the key since, and retries replay. fn
// runs once in all.
func TestServerKilledWhileFnRuns(t *testing.T) {
	srv := testenv.NewRedis(t)
	newClient := func() redis.UniversalClient {
		return nodeClient(t, srv.Addr, func(o *redis.Options) { o.DialTimeout, o.MaxRetries = time.Second, 1 })
	}
	backendErrors := make(chan struct{}, 100)
	opts := []middleware.Option{
		middleware.WithWaitBudget(0), middleware.WithLeaseTTL(2 * time.Second),
		middleware.WithRecordWriteTimeout(2 * time.Minute), middleware.WithOpTimeout(2 * time.Second),
		middleware.WithBackoff(idemkit.Backoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond}),
	}
	first := newGuard(t, newClient(), append(opts, middleware.WithHook(middleware.HookFunc(func(_ context.Context, e middleware.Event) {
		if e.Kind == middleware.EventBackendError {
			select {
			case backendErrors <- struct{}{}:
			default:
			}
		}
	})))...)
	other := newGuard(t, newClient(), opts...)

	var runs atomic.Int32
	started, gate := make(chan struct{}), make(chan struct{})
	type result struct {
		out middleware.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := first.Execute(context.Background(), "order-1", fp, func(context.Context) (middleware.Result, error) {
			runs.Add(1)
			close(started)
			<-gate
			return middleware.Result{Value: []byte("receipt")}, nil
		})
		done <- result{out, err}
	}()
	<-started
	srv.Stop(t)
	if _, err := other.Execute(t.Context(), "order-1", fp, answer(&runs, "second")); !errors.Is(err, middleware.ErrUnavailable) {
		t.Fatalf("a duplicate while the server is down: %v; want ErrUnavailable", err)
	}
	close(gate) // fn returns; its outcome cannot be written yet
	select {
	case <-backendErrors:
	case <-time.After(time.Minute):
		t.Fatal("the guard reported no failed write while the server was down")
	}
	time.Sleep(2 * time.Second) // the lease runs out while the server is down
	srv.Start(t)

	var r result
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the first request never finished")
	}
	if r.err != nil || !r.out.Recorded || string(r.out.Value) != "receipt" {
		t.Fatalf("the first request: %+v, %v; want its outcome recorded after the restart", r.out, r.err)
	}
	out, err := other.Execute(t.Context(), "order-1", fp, answer(&runs, "second"))
	if err != nil || !out.Replayed || string(out.Value) != "receipt" {
		t.Fatalf("a retry after the outcome landed: %+v, %v; want the replay", out, err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times; want 1", n)
	}
}

// TestOutOfMemoryThroughGuard: a guard on an out-of-memory Redis answers
// unavailable for a new key, with the store's RateLimited error inside,
// and keeps replaying what is stored.
func TestOutOfMemoryThroughGuard(t *testing.T) {
	srv := testenv.NewRedis(t)
	c := nodeClient(t, srv.Addr)
	g := newGuard(t, c)
	var runs atomic.Int32
	if _, err := g.Execute(t.Context(), "stored", fp, answer(&runs, "receipt")); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(t.Context(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := g.Execute(t.Context(), "fresh", fp, answer(&runs, "x"))
	if !errors.Is(err, middleware.ErrUnavailable) || idemkit.CodeOf(err) != idemkit.CodeRateLimited {
		t.Fatalf("a new key on an out-of-memory Redis: %v; want ErrUnavailable with RateLimited", err)
	}
	t.Logf("the error: %v", err)
	if out, err := g.Execute(t.Context(), "stored", fp, answer(&runs, "x")); err != nil || !out.Replayed {
		t.Fatalf("a replay on an out-of-memory Redis: %+v, %v", out, err)
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times; want 1", runs.Load())
	}
}

// TestStalledServerThroughGuard: with the server frozen (SIGSTOP), a
// request gets ErrUnavailable within the op timeout (an HTTP adapter
// answers 503), never a hang, and fn does not run; once the server is back,
// the same key executes.
func TestStalledServerThroughGuard(t *testing.T) {
	srv := testenv.NewRedis(t)
	const opTimeout = time.Second
	g := newGuard(t, nodeClient(t, srv.Addr), middleware.WithOpTimeout(opTimeout), middleware.WithLeaseTTL(2*time.Second))
	var runs atomic.Int32
	resume := srv.Stall(t)
	start := time.Now()
	_, err := g.Execute(t.Context(), "stalled", fp, answer(&runs, "v"))
	took := time.Since(start)
	if !errors.Is(err, middleware.ErrUnavailable) || runs.Load() != 0 {
		t.Fatalf("Execute on a stalled server: %v, fn ran %d times; want ErrUnavailable and no run", err, runs.Load())
	}
	if took > opTimeout+2*time.Second {
		t.Fatalf("Execute on a stalled server took %v; want about the op timeout (%v)", took, opTimeout)
	}
	resume()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := g.Execute(t.Context(), "stalled", fp, answer(&runs, "v"))
		if err == nil {
			if out.Replayed || runs.Load() != 1 {
				t.Fatalf("after the server came back: %+v, runs %d; want one execution", out, runs.Load())
			}
			break
		}
		// The claim sent before the stall runs when the server resumes and
		// holds the key until its lease ends: busy, never a second run.
		if time.Now().After(deadline) || !errors.Is(err, middleware.ErrInProgress) {
			t.Fatalf("after the server came back: %v", err)
		}
	}
}
