package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
)

// node is one guard with a connection pool of its own, as one server
// process of a service would have.
type node struct {
	guard *middleware.Guard
	db    *sql.DB
	store *Store
	rt    *roundTrips
}

// cluster builds n nodes on one fresh table, each with a pool of its own
// whose round trips are counted.
func cluster(t *testing.T, dsn string, n int, opts ...middleware.Option) []node {
	t.Helper()
	admin := newDB(t, dsn, 2, nil)
	opt := table(t, admin)
	nodes := make([]node, n)
	for i := range nodes {
		rt := &roundTrips{}
		db := newDB(t, dsn, 8, rt)
		s, err := New(db, opt, WithLogger(discard()))
		if err != nil {
			t.Fatal(err)
		}
		g, err := middleware.New(s, opts...)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = node{guard: g, db: db, store: s, rt: rt}
	}
	return nodes
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// fastWaits makes duplicates claim again every few milliseconds while they
// wait (MySQL cannot wake them when the outcome lands).
var fastWaits = middleware.WithBackoff(idemkit.Backoff{Base: 2 * time.Millisecond, Max: 20 * time.Millisecond})

func fpOf(s string) fingerprint.Fingerprint {
	return fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/" + s})
}

// TestExactlyOnceAcrossNodes races 64 goroutines over 4 guards, each with
// its own pool, on one key, 30 times (guardtest.ExactlyOnce): every time,
// the work runs exactly once, every other caller gets its response
// replayed (or is told the request is in progress), and afterwards every
// guard replays it.
func TestExactlyOnceAcrossNodes(t *testing.T) {
	t.Parallel()
	nodes := cluster(t, testenv.MySQL(t).DSN, 4, middleware.WithLogger(discard()), fastWaits,
		middleware.WithWaitBudget(20*time.Second))
	guards := make([]*middleware.Guard, len(nodes))
	for i, n := range nodes {
		guards[i] = n.guard
	}
	guardtest.ExactlyOnce(t, guards, guardtest.Race{
		Callers: 64, Rounds: 30, KeyPrefix: "order-", InProgressOK: true, MaxWork: 2 * time.Millisecond,
	})
}

// TestGuardRoundTrips counts what a guard sends: a first execution costs
// two round trips (claim, complete), a replay one.
func TestGuardRoundTrips(t *testing.T) {
	t.Parallel()
	n := cluster(t, testenv.MySQL(t).DSN, 1, middleware.WithLogger(discard()))[0]
	fp := fpOf("the same request")
	for i := range 5 {
		key := fmt.Sprint("order-", i)
		cost := func(what string, want int) {
			t.Helper()
			before := n.rt.count()
			out, err := n.guard.Execute(t.Context(), key, fp, func(context.Context) (middleware.Result, error) {
				return middleware.Result{Value: []byte(key)}, nil
			})
			if err != nil || string(out.Value) != key || out.Replayed != (want == 1) {
				t.Fatalf("%s: %+v, %v", what, out, err)
			}
			if got := n.rt.count() - before; got != want {
				t.Fatalf("%s: %d round trips; want %d", what, got, want)
			}
		}
		cost("first execution", 2)
		cost("replay", 1)
		cost("second replay", 1)
	}
}

// TestStalledServerThroughHTTP: with the server frozen (SIGSTOP), a
// request through the net/http adapter is answered 503 with Retry-After
// within the op timeout, never a hang, and the handler does not run; once
// the server is back, the same key executes.
func TestStalledServerThroughHTTP(t *testing.T) {
	srv := testenv.NewMySQL(t)
	const opTimeout = time.Second
	var log guardtest.Log
	admin := newDB(t, srv.DSN, 2, nil)
	opt := table(t, admin)
	s, err := New(newDB(t, srv.DSN, 8, nil), opt)
	if err != nil {
		t.Fatal(err)
	}
	g, err := middleware.New(s, middleware.WithOpTimeout(opTimeout), middleware.WithLeaseTTL(2*time.Second),
		middleware.WithLogger(log.Logger()), middleware.WithFailureLogInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	url := guardtest.Serve(t, g)
	if a := guardtest.Post(t, url, "warm"); a.Status != http.StatusCreated {
		t.Fatalf("before the stall: %+v", a)
	}
	resume := srv.Stall(t)
	start := time.Now()
	a := guardtest.Post(t, url, "stalled")
	took := time.Since(start)
	if a.Status != http.StatusServiceUnavailable || a.RetryAfter == "" {
		t.Fatalf("a request on a stalled server: %+v; want 503 with Retry-After", a)
	}
	if took > opTimeout+2*time.Second {
		t.Fatalf("a request on a stalled server took %v; want about the op timeout (%v)", took, opTimeout)
	}
	resume()
	deadline := time.Now().Add(30 * time.Second)
	for {
		a := guardtest.Post(t, url, "stalled")
		if a.Status == http.StatusCreated {
			break
		}
		// A claim sent before the stall may land when the server resumes
		// and hold the key until its lease ends: busy, never a second run.
		if time.Now().After(deadline) || (a.Status != http.StatusConflict && a.Status != http.StatusServiceUnavailable) {
			t.Fatalf("after the server came back: %+v", a)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestKilledServerUnderRunningService: a service whose server is killed
// answers every request 503 with Retry-After, and its guard logs why once.
func TestKilledServerUnderRunningService(t *testing.T) {
	srv := testenv.NewMySQL(t)
	admin := newDB(t, srv.DSN, 2, nil)
	opt := table(t, admin)
	s, err := New(newDB(t, srv.DSN, 8, nil), opt)
	if err != nil {
		t.Fatal(err)
	}
	var log guardtest.Log
	g, err := middleware.New(s, middleware.WithLogger(log.Logger()), middleware.WithFailureLogInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	url := guardtest.Serve(t, g)
	if a := guardtest.Post(t, url, "before"); a.Status != http.StatusCreated {
		t.Fatalf("before the kill: %+v", a)
	}
	srv.Stop(t)
	guardtest.CheckOutage(t, url, &log, guardtest.Outage{
		Requests: 20, Status: http.StatusServiceUnavailable, Kind: "idempotency-unavailable",
		Code: "ServiceUnavailable", Words: []string{"MySQL is unreachable"},
	})
	srv.Start(t)
	if a := guardtest.Post(t, url, "after"); a.Status != http.StatusCreated {
		t.Fatalf("after the restart: %+v; want the service back", a)
	}
	recs, _, err := s.List(t.Context(), "", "", 10)
	if err != nil || len(recs) != 2 || recs[0].State != store.StateCompleted || recs[1].State != store.StateCompleted {
		t.Fatalf("the records after the restart: %+v, %v; want the outcomes of the requests before the kill and after the restart", recs, err)
	}
}

// TestDroppedTableUnderRunningService: a service whose record table is
// dropped while it runs answers every request 500 of its own problem type,
// and its guard logs the fix (run mysqlstore.SetupSchema) once.
func TestDroppedTableUnderRunningService(t *testing.T) {
	t.Parallel()
	srv := testenv.MySQL(t)
	admin := newDB(t, srv.DSN, 4, nil)
	opt := table(t, admin)
	s, err := New(admin, opt)
	if err != nil {
		t.Fatal(err)
	}
	var log guardtest.Log
	g, err := middleware.New(s, middleware.WithLogger(log.Logger()), middleware.WithFailureLogInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	url := guardtest.Serve(t, g)
	if a := guardtest.Post(t, url, "before"); a.Status != http.StatusCreated {
		t.Fatalf("before the drop: %+v", a)
	}
	if _, err := admin.ExecContext(t.Context(), "DROP TABLE "+tableOf(s)); err != nil {
		t.Fatal(err)
	}
	guardtest.CheckOutage(t, url, &log, guardtest.Outage{
		Requests: 20, Status: http.StatusInternalServerError, Kind: "idempotency-misconfigured",
		Code: "Misconfigured", Words: []string{"run mysqlstore.SetupSchema", "1146"},
	})
}

// TestFailover runs guarded requests on 3 nodes while the server is killed
// (SIGKILL) mid-load and started again on its data. No request may run
// twice; every execution reported recorded must be in the store and be
// replayed afterwards; the guard may answer in progress or unavailable,
// never run work whose record it could not read.
func TestFailover(t *testing.T) {
	srv := testenv.NewMySQL(t, "--innodb-flush-log-at-trx-commit=1")
	nodes := cluster(t, srv.DSN, 3, middleware.WithLogger(discard()),
		middleware.WithLeaseTTL(5*time.Second), middleware.WithWaitBudget(2*time.Second),
		middleware.WithBackoff(idemkit.Backoff{Base: 2 * time.Millisecond, Max: 50 * time.Millisecond}),
		middleware.WithOpTimeout(2*time.Second))
	const (
		keys    = 60
		callers = 4
	)
	type result struct {
		executions atomic.Int32
		mu         sync.Mutex
		recorded   int
	}
	results := make([]*result, keys)
	var unavailable, inProgress, replayed, unrecorded atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, keys*callers)
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		time.Sleep(300 * time.Millisecond)
		srv.Stop(t)
		time.Sleep(500 * time.Millisecond)
		srv.Start(t)
	}()
	for k := range keys {
		r := &result{}
		results[k] = r
		key := fmt.Sprintf("failover-%d", k)
		for i := range callers {
			wg.Go(func() {
				time.Sleep(time.Duration(k*20+rand.N(100)) * time.Millisecond)
				out, err := nodes[(k+i)%len(nodes)].guard.Execute(t.Context(), key, fpOf("failover"), func(ctx context.Context) (middleware.Result, error) {
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
				case out.Recorded:
					r.mu.Lock()
					r.recorded++
					r.mu.Unlock()
				default:
					unrecorded.Add(1)
				}
			})
		}
	}
	wg.Wait()
	<-killed
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	recorded, executed := 0, 0
	for k, r := range results {
		key := fmt.Sprintf("failover-%d", k)
		n := r.executions.Load()
		if n > 1 {
			t.Fatalf("%s: the work ran %d times", key, n)
		}
		executed += int(n)
		recorded += r.recorded
		if r.recorded == 0 {
			continue
		}
		var out middleware.Outcome
		var err error
		for range 50 { // the server may still be recovering
			out, err = nodes[0].guard.Execute(t.Context(), key, fpOf("failover"), func(context.Context) (middleware.Result, error) {
				t.Errorf("%s: recorded, yet the work ran again", key)
				return middleware.Result{}, nil
			})
			if !errors.Is(err, middleware.ErrUnavailable) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil || !out.Replayed || string(out.Value) != key {
			t.Fatalf("%s: a recorded execution was not replayed after the restart: %+v, %v", key, out, err)
		}
	}
	if unavailable.Load() == 0 {
		t.Fatal("no request met the killed server: the test did not test a failure")
	}
	if recorded == 0 {
		t.Fatal("nothing was recorded")
	}
	t.Logf("%d keys: %d executed, %d recorded, %d unrecorded; %d replays, %d in progress, %d unavailable",
		keys, executed, recorded, unrecorded.Load(), replayed.Load(), inProgress.Load(), unavailable.Load())
}

// TestGuardCheck: the startup check passes on a good setup and names the
// fix on a missing table.
func TestGuardCheck(t *testing.T) {
	t.Parallel()
	srv := testenv.MySQL(t)
	admin := newDB(t, srv.DSN, 4, nil)
	opt := WithTable(newDatabase(t, admin) + ".records")
	s, err := New(admin, opt)
	if err != nil {
		t.Fatal(err)
	}
	g, err := middleware.New(s)
	if err != nil {
		t.Fatal(err)
	}
	err = g.Check(t.Context())
	if idemkit.CodeOf(err) != idemkit.CodeMisconfigured || !strings.Contains(err.Error(), "run mysqlstore.SetupSchema") {
		t.Fatalf("Check before SetupSchema: %v; want Misconfigured saying to run mysqlstore.SetupSchema", err)
	}
	if err := SetupSchema(t.Context(), admin, opt); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(t.Context()); err != nil {
		t.Fatalf("Check on a good setup: %v", err)
	}
}
