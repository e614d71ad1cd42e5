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

	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/pglock"
	"github.com/idemkit/idemkit/lock/pglock/pgtest"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/middleware/guardtest"
)

// node is one guard instance with a connection pool of its own, as one
// server process of a service would have.
type node struct {
	guard *middleware.Guard
	pool  *pgxpool.Pool
	store *Store
}

// cluster builds n nodes on the tables of one fresh schema, each pool
// tagged with appName so its backends can be found in pg_stat_activity.
func cluster(t *testing.T, url string, n int, appName string, opts ...middleware.Option) []node {
	t.Helper()
	admin := pgtest.NewPool(t, url, 2)
	schema := pgtest.Schema(t, admin)
	lockOpts := []pglock.Option{pglock.WithTable(schema + ".locks"), pglock.WithFenceTable(schema + ".fences")}
	recOpt := WithTable(schema + ".records")
	ctx := t.Context()
	if err := pglock.SetupSchema(ctx, admin, lockOpts...); err != nil {
		t.Fatal(err)
	}
	if err := SetupSchema(ctx, admin, recOpt); err != nil {
		t.Fatal(err)
	}
	nodes := make([]node, n)
	for i := range nodes {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 8
		cfg.ConnConfig.RuntimeParams["application_name"] = appName
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s, err := New(pool, recOpt)
		if err != nil {
			t.Fatal(err)
		}
		l, err := pglock.New(pool, lockOpts...)
		if err != nil {
			t.Fatal(err)
		}
		g, err := middleware.New(s, l, opts...)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = node{guard: g, pool: pool, store: s}
	}
	return nodes
}

// TestExactlyOnceAcrossNodes races 64 goroutines over 4 guards, each with
// its own pool, on one key, 50 times (guardtest.ExactlyOnce): every time,
// the work runs exactly once, every other caller gets its response
// replayed or is told the request is in progress, and afterwards every
// guard replays it.
func TestExactlyOnceAcrossNodes(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	// Waiters poll the lock quickly (PostgreSQL cannot wake them on a
	// release), so the 63 duplicates of each round replay within
	// milliseconds of the execution.
	nodes := cluster(t, srv.URL, 4, testenv.Name(t), middleware.WithLogger(discard()),
		middleware.WithBaseDelay(2*time.Millisecond), middleware.WithMaxDelay(20*time.Millisecond),
		middleware.WithLockRetries(1000), middleware.WithWaitBudget(20*time.Second))
	guards := make([]*middleware.Guard, len(nodes))
	for i, n := range nodes {
		guards[i] = n.guard
	}
	guardtest.ExactlyOnce(t, guards, guardtest.Race{
		Callers: 64, Rounds: 50, KeyPrefix: "order-", InProgressOK: true, MaxWork: 2 * time.Millisecond,
	})
}

// TestTerminatedConnections runs guarded requests on 4 nodes while another
// connection keeps terminating the nodes' backends (pg_terminate_backend),
// mid-statement and mid-transaction. No request may run twice; every
// execution reported recorded must be in the store and be replayed; the
// guard may answer in progress or unavailable, never run work whose record
// it could not read.
func TestTerminatedConnections(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	app := testenv.Name(t)
	nodes := cluster(t, srv.URL, 4, app, middleware.WithLogger(discard()),
		middleware.WithLockTTL(5*time.Second), middleware.WithWaitBudget(2*time.Second),
		middleware.WithBaseDelay(2*time.Millisecond), middleware.WithMaxDelay(50*time.Millisecond),
		middleware.WithLockRetries(1000), middleware.WithOpTimeout(2*time.Second))
	admin := pgtest.NewPool(t, srv.URL, 2)
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
			// One of the nodes' backends, a busy one (in a statement or
			// a transaction) if there is one.
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
		recorded   []string // values of executions reported recorded
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
						r.recorded = append(r.recorded, string(out.Value))
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
		recorded += len(r.recorded)
		if len(r.recorded) == 0 {
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

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestRecordWrittenAfterConnectionsCut cuts every connection of the node
// that runs the work, from another connection, at the moment the work
// finishes: the record write that follows meets dead connections. The
// guard retries it on new ones; the outcome is recorded, the work never runs
// again, and every retry, on any node, replays it.
func TestRecordWrittenAfterConnectionsCut(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	app := testenv.Name(t)
	nodes := cluster(t, srv.URL, 2, app, middleware.WithLogger(discard()), middleware.WithBaseDelay(5*time.Millisecond))
	admin := pgtest.NewPool(t, srv.URL, 1)
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
		if got, ok, err := nodes[1].store.Get(t.Context(), "idempotency:record:{k:"+key+"}"); err != nil || !ok || string(got.Response) != key {
			t.Fatalf("%s: the stored record: %+v, %v, %v", key, got, ok, err)
		}
		if n := executions.Load(); n != 1 {
			t.Fatalf("%s: the work ran %d times", key, n)
		}
	}
}
