package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
)

// node is one guard with a connection pool of its own, as one server
// process of a service would have.
type node struct {
	guard *middleware.Guard
	pool  *pgxpool.Pool
	store *Store
	stmts *statements
}

// cluster builds n nodes on one fresh table, each pool tagged with appName
// (so its backends can be found in pg_stat_activity) and its statements
// counted.
func cluster(t *testing.T, url string, n int, appNameTag string, opts ...middleware.Option) []node {
	t.Helper()
	admin := newPool(t, url, 2)
	opt := table(t, admin)
	nodes := make([]node, n)
	for i := range nodes {
		st := &statements{}
		pool := newPool(t, url, 8, appName(appNameTag), traced(st))
		s, err := New(pool, opt, WithLogger(discard()))
		if err != nil {
			t.Fatal(err)
		}
		g, err := middleware.New(s, opts...)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = node{guard: g, pool: pool, store: s, stmts: st}
	}
	return nodes
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// fastWaits makes duplicates claim again every few milliseconds while they
// wait (PostgreSQL cannot wake them when the outcome lands).
var fastWaits = middleware.WithBackoff(idemkit.Backoff{Base: 2 * time.Millisecond, Max: 20 * time.Millisecond})

// TestExactlyOnceAcrossNodes races 64 goroutines over 4 guards, each with
// its own pool, on one key, 50 times (guardtest.ExactlyOnce): every time,
// the work runs exactly once, every other caller gets its response
// replayed (or is told the request is in progress), and afterwards every
// guard replays it.
func TestExactlyOnceAcrossNodes(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	nodes := cluster(t, srv.URL, 4, testenv.Name(t), middleware.WithLogger(discard()), fastWaits,
		middleware.WithWaitBudget(20*time.Second))
	guards := make([]*middleware.Guard, len(nodes))
	for i, n := range nodes {
		guards[i] = n.guard
	}
	guardtest.ExactlyOnce(t, guards, guardtest.Race{
		Callers: 64, Rounds: 50, KeyPrefix: "order-", InProgressOK: true, MaxWork: 2 * time.Millisecond,
	})
}

// TestGuardRoundTrips counts the statements a guard sends: a first
// execution costs two (claim, complete), a replay one, with and without an
// event hook.
func TestGuardRoundTrips(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	fp, err := fingerprint.Value("the same request")
	if err != nil {
		t.Fatal(err)
	}
	var events atomic.Int32
	hook := middleware.WithHook(middleware.HookFunc(func(context.Context, middleware.Event) { events.Add(1) }))
	for _, withHook := range []bool{false, true} {
		opts := []middleware.Option{middleware.WithLogger(discard())}
		if withHook {
			opts = append(opts, hook)
		}
		n := cluster(t, srv.URL, 1, testenv.Name(t), opts...)[0]
		for i := range 5 {
			key := fmt.Sprint("order-", i)
			cost := func(what string, want int) {
				t.Helper()
				before := n.stmts.count()
				out, err := n.guard.Execute(t.Context(), key, fp, func(context.Context) (middleware.Result, error) {
					return middleware.Result{Value: []byte(key)}, nil
				})
				if err != nil || string(out.Value) != key || out.Replayed != (want == 1) {
					t.Fatalf("hook %v, %s: %+v, %v", withHook, what, out, err)
				}
				if got := n.stmts.count() - before; got != want {
					t.Fatalf("hook %v, %s: %d statements; want %d", withHook, what, got, want)
				}
			}
			cost("first execution", 2)
			cost("replay", 1)
			cost("second replay", 1)
		}
	}
	if events.Load() == 0 {
		t.Fatal("the hook saw no event")
	}
}

// TestOutageMidHandler freezes the server for 15 s while the handler runs;
// the handler returns during the outage, and the guard's completion,
// retried (record write timeout 30 s by default), lands once the server is
// back. A retry of the same request then replays the response, on this
// node and another, and the handler ran exactly once.
func TestOutageMidHandler(t *testing.T) {
	t.Parallel()
	srv := testenv.NewPostgres(t)
	nodes := cluster(t, srv.URL, 2, testenv.Name(t), middleware.WithLogger(discard()))
	fp, err := fingerprint.Value("charge 42")
	if err != nil {
		t.Fatal(err)
	}
	const outage = 15 * time.Second
	var (
		runs   atomic.Int32
		resume func()
		frozen = make(chan time.Time, 1)
	)
	t0 := time.Now()
	out, err := nodes[0].guard.Execute(t.Context(), "charge-42", fp, func(ctx context.Context) (middleware.Result, error) {
		runs.Add(1)
		resume = srv.Stall(t)
		frozen <- time.Now()
		time.Sleep(time.Second) // the handler returns during the outage
		go func() {
			time.Sleep(outage - time.Second)
			resume()
		}()
		return middleware.Result{Value: []byte("charged")}, nil
	})
	took := time.Since(t0)
	start := <-frozen
	if err != nil || out.Replayed || !out.Recorded || string(out.Value) != "charged" {
		t.Fatalf("Execute across the outage: %+v, %v; want executed and recorded", out, err)
	}
	if since := time.Since(start); since < outage-time.Second {
		t.Fatalf("the execution returned %v into a %v outage: the outcome cannot have been written", since, outage)
	}
	t.Logf("executed and recorded in %v, across a %v outage", took, outage)
	for _, n := range nodes {
		out, err := n.guard.Execute(t.Context(), "charge-42", fp, func(context.Context) (middleware.Result, error) {
			runs.Add(1)
			return middleware.Result{Value: []byte("charged again")}, nil
		})
		if err != nil || !out.Replayed || string(out.Value) != "charged" {
			t.Fatalf("the retry after the outage: %+v, %v; want a replay", out, err)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times", n)
	}
}

// TestTerminatedConnections runs guarded requests on 4 nodes while another
// connection keeps terminating the nodes' backends (pg_terminate_backend),
// mid-statement. No request may run twice; every execution reported
// recorded must be in the store and be replayed; the guard may answer in
// progress or unavailable, never run work whose record it could not read.
func TestTerminatedConnections(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	app := testenv.Name(t)
	nodes := cluster(t, srv.URL, 4, app, middleware.WithLogger(discard()),
		middleware.WithLeaseTTL(5*time.Second), middleware.WithWaitBudget(2*time.Second),
		middleware.WithBackoff(idemkit.Backoff{Base: 2 * time.Millisecond, Max: 50 * time.Millisecond}),
		middleware.WithOpTimeout(2*time.Second))
	admin := newPool(t, srv.URL, 2)
	fp, err := fingerprint.Value("the same request")
	if err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var killed atomic.Int64
	killer := make(chan error, 1)
	go func() {
		defer close(killer)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(5+rand.N(20)) * time.Millisecond):
			}
			// One of the nodes' backends, a busy one if there is one.
			var n int64
			err := admin.QueryRow(context.Background(), `SELECT count(*) FROM (
				SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE application_name = $1 AND pid <> pg_backend_pid()
				ORDER BY state = 'idle', random() LIMIT 1) AS t`, app).Scan(&n)
			if err != nil {
				killer <- err
				return
			}
			killed.Add(n)
		}
	}()

	const (
		keys    = 40
		callers = 8
	)
	type result struct {
		executions atomic.Int32
		mu         sync.Mutex
		recorded   int
		unrecorded int
	}
	results := make([]*result, keys)
	var unavailable, inProgress, replayed atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, keys*callers)
	for k := range keys {
		r := &result{}
		results[k] = r
		key := fmt.Sprintf("fault-%d", k)
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(rand.N(200)) * time.Millisecond)
				out, err := nodes[(k+i)%len(nodes)].guard.Execute(t.Context(), key, fp, func(ctx context.Context) (middleware.Result, error) {
					r.executions.Add(1)
					return middleware.Result{Value: []byte(key)}, nil
				})
				switch {
				case errors.Is(err, middleware.ErrUnavailable):
					unavailable.Add(1)
				case errors.Is(err, middleware.ErrInProgress):
					inProgress.Add(1)
				case err != nil:
					errs <- fmt.Errorf("%s: %w", key, err)
				case out.Replayed:
					replayed.Add(1)
					if string(out.Value) != key {
						errs <- fmt.Errorf("%s: replayed %q", key, out.Value)
					}
				default:
					r.mu.Lock()
					if out.Recorded {
						r.recorded++
					} else {
						r.unrecorded++
					}
					r.mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	close(stop)
	if err := <-killer; err != nil {
		t.Fatalf("the killer failed: %v", err)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// With the faults over, every recorded execution is in the store and
	// is replayed; nothing ran twice.
	g := nodes[0].guard
	recorded, unrecorded := 0, 0
	for k, r := range results {
		key := fmt.Sprintf("fault-%d", k)
		if n := r.executions.Load(); n > 1 {
			t.Fatalf("%s: the work ran %d times", key, n)
		}
		unrecorded += r.unrecorded
		recorded += r.recorded
		if r.recorded == 0 {
			continue
		}
		out, err := g.Execute(t.Context(), key, fp, func(context.Context) (middleware.Result, error) {
			t.Errorf("%s: recorded, yet the work ran again", key)
			return middleware.Result{}, nil
		})
		if err != nil || !out.Replayed || string(out.Value) != key {
			t.Fatalf("%s: a recorded execution was not replayed after the faults: %+v, %v", key, out, err)
		}
	}
	t.Logf("%d backends terminated; %d executions recorded, %d unrecorded; %d replays, %d in progress, %d unavailable",
		killed.Load(), recorded, unrecorded, replayed.Load(), inProgress.Load(), unavailable.Load())
}

// TestRecordWrittenAfterConnectionsCut cuts every connection of the node
// that runs the work, from another connection, at the moment the work
// finishes: the completion that follows meets dead connections. It is
// retried on new ones; the outcome is recorded, the work never runs again,
// and every retry, on any node, replays it.
func TestRecordWrittenAfterConnectionsCut(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	app := testenv.Name(t)
	nodes := cluster(t, srv.URL, 2, app, middleware.WithLogger(discard()),
		middleware.WithBackoff(idemkit.Backoff{Base: 5 * time.Millisecond, Max: 50 * time.Millisecond}))
	admin := newPool(t, srv.URL, 1)
	fp, err := fingerprint.Value("the same request")
	if err != nil {
		t.Fatal(err)
	}
	for round := range 10 {
		key := fmt.Sprint("cut-", round)
		var executions atomic.Int32
		work := func(ctx context.Context) (middleware.Result, error) {
			executions.Add(1)
			if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE application_name = $1 AND pid <> pg_backend_pid()`, app); err != nil {
				return middleware.Result{}, err
			}
			return middleware.Result{Value: []byte(key)}, nil
		}
		out, err := nodes[0].guard.Execute(t.Context(), key, fp, work)
		if err != nil || out.Replayed || !out.Recorded {
			t.Fatalf("%s: %+v, %v; want executed and recorded despite the cut", key, out, err)
		}
		for _, n := range nodes {
			out, err := n.guard.Execute(t.Context(), key, fp, work)
			if err != nil || !out.Replayed || string(out.Value) != key {
				t.Fatalf("%s: retry %+v, %v; want a replay", key, out, err)
			}
		}
		if got, ok, err := nodes[1].store.Get(t.Context(), "idempotency::"+key); err != nil || !ok || string(got.Response) != key {
			t.Fatalf("%s: the stored record: %+v, %v, %v", key, got, ok, err)
		}
		if n := executions.Load(); n != 1 {
			t.Fatalf("%s: the work ran %d times", key, n)
		}
	}
}

// TestStalledServerThroughGuard: with the server frozen (SIGSTOP, its
// backends included), a request gets ErrUnavailable within the op timeout
// (an HTTP adapter answers 503), never a hang, and fn does not run; once
// the server is back, the same key executes.
func TestStalledServerThroughGuard(t *testing.T) {
	srv := testenv.NewPostgres(t)
	const opTimeout = time.Second
	nodes := cluster(t, srv.URL, 1, "stall", middleware.WithOpTimeout(opTimeout), middleware.WithLeaseTTL(2*time.Second), middleware.WithLogger(discard()))
	g := nodes[0].guard
	var runs atomic.Int32
	work := func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{Value: []byte("v")}, nil
	}
	if _, err := g.Execute(t.Context(), "warm", fpOf("warm"), work); err != nil { // connections open, statements prepared
		t.Fatal(err)
	}
	resume := srv.Stall(t)
	start := time.Now()
	_, err := g.Execute(t.Context(), "stalled", fpOf("stalled"), work)
	took := time.Since(start)
	if !errors.Is(err, middleware.ErrUnavailable) || runs.Load() != 1 {
		t.Fatalf("Execute on a stalled server: %v, fn ran %d times; want ErrUnavailable and no run", err, runs.Load()-1)
	}
	if took > opTimeout+2*time.Second {
		t.Fatalf("Execute on a stalled server took %v; want about the op timeout (%v)", took, opTimeout)
	}
	resume()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := g.Execute(t.Context(), "stalled", fpOf("stalled"), work)
		if err == nil {
			if out.Replayed || runs.Load() != 2 {
				t.Fatalf("after the server came back: %+v, runs %d; want one execution", out, runs.Load())
			}
			break
		}
		// A claim sent before the stall may run when the server resumes
		// and hold the key until its lease ends: busy, never a second run.
		if time.Now().After(deadline) || !(errors.Is(err, middleware.ErrInProgress) || errors.Is(err, middleware.ErrUnavailable)) {
			t.Fatalf("after the server came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func fpOf(s string) fingerprint.Fingerprint {
	return fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/" + s})
}
