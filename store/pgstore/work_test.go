package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store"
)

// ordersTable creates the business table of the transactional tests in
// the records' schema and returns its name: one row per order, with the
// idempotency key it was made under and who made it (no unique
// constraint, so that a second execution would show as a second row).
func ordersTable(t *testing.T, admin *pgxpool.Pool, s *Store) string {
	t.Helper()
	name := strings.TrimSuffix(tableOf(s), `"records"`) + `"orders"`
	if _, err := admin.Exec(t.Context(), `CREATE TABLE `+name+` (id bigserial PRIMARY KEY, key text NOT NULL, who text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return name
}

// txCluster sets up a transactional test: n nodes (see cluster) on the
// package's server whose guards have opts and discard their logs, a pool
// of the test's own and the orders table (see ordersTable).
func txCluster(t *testing.T, n int, opts ...middleware.Option) (nodes []node, admin *pgxpool.Pool, orders string) {
	t.Helper()
	srv := testenv.Postgres(t)
	nodes = cluster(t, srv.URL, n, testenv.Name(t), append([]middleware.Option{middleware.WithLogger(discard())}, opts...)...)
	admin = newPool(t, srv.URL, 2)
	return nodes, admin, ordersTable(t, admin, nodes[0].store)
}

// orderRows returns who made each row of key, in order.
func orderRows(t *testing.T, admin *pgxpool.Pool, orders, key string) []string {
	t.Helper()
	rows, err := admin.Query(t.Context(), `SELECT who FROM `+orders+` WHERE key = $1 ORDER BY id`, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var who []string
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			t.Fatal(err)
		}
		who = append(who, w)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return who
}

// insertOrder inserts an order row for the guarded call of ctx in its
// transaction.
func insertOrder(ctx context.Context, orders, who string) error {
	tx, err := Tx(ctx)
	if err != nil {
		return err
	}
	info, _ := middleware.CallInfoFrom(ctx)
	_, err = tx.Exec(ctx, `INSERT INTO `+orders+` (key, who) VALUES ($1, $2)`, info.Key, who)
	return err
}

// TestTxCommitsWithOutcome: the work's row and its record commit
// together; a duplicate on another node replays without running; the
// transaction refuses the work's own Commit and Rollback; Tx outside
// guarded work says so.
func TestTxCommitsWithOutcome(t *testing.T) {
	t.Parallel()
	nodes, admin, orders := txCluster(t, 2)
	ctx := t.Context()

	if _, err := Tx(ctx); !errors.Is(err, ErrNoTransaction) {
		t.Fatalf("Tx outside guarded work: %v; want ErrNoTransaction", err)
	}
	var runs atomic.Int64
	work := func(ctx context.Context) (string, error) {
		runs.Add(1)
		if err := insertOrder(ctx, orders, "first"); err != nil {
			return "", err
		}
		tx, err := Tx(ctx)
		if err != nil {
			return "", err
		}
		if err := tx.Commit(ctx); !errors.Is(err, ErrGuardCommits) {
			return "", fmt.Errorf("the work's Commit: %v; want ErrGuardCommits", err)
		}
		if err := tx.Rollback(ctx); !errors.Is(err, ErrGuardCommits) {
			return "", fmt.Errorf("the work's Rollback: %v; want ErrGuardCommits", err)
		}
		// A savepoint is the work's own.
		sp, err := tx.Begin(ctx)
		if err != nil {
			return "", err
		}
		if _, err := sp.Exec(ctx, `INSERT INTO `+orders+` (key, who) VALUES ('savepoint', 'first')`); err != nil {
			return "", err
		}
		if err := sp.Rollback(ctx); err != nil {
			return "", err
		}
		return "order-1", nil
	}
	v, replayed, err := middleware.Do(ctx, nodes[0].guard, "k1", "payload", work)
	if err != nil || replayed || v != "order-1" {
		t.Fatalf("first: %q, replayed %v, %v", v, replayed, err)
	}
	v, replayed, err = middleware.Do(ctx, nodes[1].guard, "k1", "payload", work)
	if err != nil || !replayed || v != "order-1" {
		t.Fatalf("replay on the other node: %q, replayed %v, %v", v, replayed, err)
	}
	if runs.Load() != 1 {
		t.Fatalf("%d executions; want 1", runs.Load())
	}
	if who := orderRows(t, admin, orders, "k1"); len(who) != 1 {
		t.Fatalf("rows of k1: %v; want one", who)
	}
	if who := orderRows(t, admin, orders, "savepoint"); len(who) != 0 {
		t.Fatalf("the rolled-back savepoint's rows: %v; want none", who)
	}
	rec, ok, err := nodes[0].store.Get(ctx, "idempotency::k1")
	if err != nil || !ok || rec.State != store.StateCompleted {
		t.Fatalf("the record: %+v, %v, %v; want completed", rec, ok, err)
	}
}

// TestTxRolledBackWithoutOutcome: work that fails, panics, asks that
// nothing be recorded, returns a verdict that stores nothing, or whose
// transaction cannot commit (a statement in it failed) leaves no row and
// no record, through Guard.Execute and through middleware.Do; its retry
// runs again, and commits. A call whose commit failed (its transaction
// aborted) fails with store.ErrWorkFailed, never Unavailable, and no
// value, and Do returns no value with any error.
func TestTxRolledBackWithoutOutcome(t *testing.T) {
	t.Parallel()
	nodes, admin, orders := txCluster(t, 1)
	g := nodes[0].guard
	callers := []struct {
		name string
		call func(ctx context.Context, key string, work middleware.Func) (string, error)
	}{
		{"execute", func(ctx context.Context, key string, work middleware.Func) (string, error) {
			out, err := g.Execute(ctx, key, fpOf("p"), work)
			return string(out.Value), err
		}},
		{"do", func(ctx context.Context, key string, work middleware.Func) (string, error) {
			v, _, err := middleware.Do(ctx, g, key, "p", func(ctx context.Context) (string, error) {
				res, err := work(ctx)
				return string(res.Value), err
			})
			return v, err
		}},
	}
	for _, c := range []struct {
		name    string
		work    middleware.Func
		verdict bool // the case is a verdict, which Do cannot return
	}{
		{name: "error", work: func(ctx context.Context) (middleware.Result, error) {
			if err := insertOrder(ctx, orders, "failed"); err != nil {
				return middleware.Result{}, err
			}
			return middleware.Result{Value: []byte("declined")}, errors.New("declined")
		}},
		{name: "panic", work: func(ctx context.Context) (middleware.Result, error) {
			if err := insertOrder(ctx, orders, "failed"); err != nil {
				return middleware.Result{}, err
			}
			panic("boom")
		}},
		{name: "forget", verdict: true, work: func(ctx context.Context) (middleware.Result, error) {
			if err := insertOrder(ctx, orders, "failed"); err != nil {
				return middleware.Result{}, err
			}
			middleware.DoNotRecord(ctx)
			return middleware.Result{Value: []byte("500")}, nil
		}},
		{name: "do-not-record", work: func(ctx context.Context) (middleware.Result, error) {
			if err := insertOrder(ctx, orders, "failed"); err != nil {
				return middleware.Result{}, err
			}
			middleware.DoNotRecord(ctx)
			return middleware.Result{Value: []byte("v")}, nil
		}},
		{name: "commit-fails", work: func(ctx context.Context) (middleware.Result, error) {
			if err := insertOrder(ctx, orders, "failed"); err != nil {
				return middleware.Result{}, err
			}
			tx, _ := Tx(ctx)
			_, _ = tx.Exec(ctx, `SELECT 1/0`) // the transaction is aborted; the work does not notice
			return middleware.Result{Value: []byte("v")}, nil
		}},
	} {
		for _, via := range callers {
			if c.verdict && via.name == "do" {
				continue
			}
			t.Run(c.name+"/"+via.name, func(t *testing.T) {
				ctx := t.Context()
				key := "rollback-" + c.name + "-" + via.name
				func() {
					defer func() { _ = recover() }()
					v, err := via.call(ctx, key, c.work)
					if c.name == "commit-fails" && (!errors.Is(err, store.ErrWorkFailed) || errors.Is(err, middleware.ErrUnavailable) || v != "") {
						t.Errorf("a commit that failed: %q, %v; want no value and store.ErrWorkFailed", v, err)
					}
					if via.name == "do" && err != nil && v != "" {
						t.Errorf("Do returned %q with its error %v; want no value", v, err)
					}
				}()
				if who := orderRows(t, admin, orders, key); len(who) != 0 {
					t.Fatalf("rows after the work %s: %v; want none", c.name, who)
				}
				v, err := via.call(ctx, key, func(ctx context.Context) (middleware.Result, error) {
					return middleware.Result{Value: []byte("second")}, insertOrder(ctx, orders, "second")
				})
				if err != nil || v != "second" {
					t.Fatalf("the retry: %q, %v; want a second execution", v, err)
				}
				if who := orderRows(t, admin, orders, key); len(who) != 1 || who[0] != "second" {
					t.Fatalf("rows after the retry: %v; want the second execution's", who)
				}
			})
		}
	}
}

// noRenewals is a store whose lease extensions fail, as they would for a
// process cut off from the database while its work runs: the claim's
// lease runs out, and another node may take the key over.
type noRenewals struct{ *Store }

func (noRenewals) Extend(context.Context, string, idemkit.Fence, time.Duration) (time.Time, bool, error) {
	return time.Time{}, false, errors.New("the database cannot be reached")
}

// takeoverGuards returns the guards of a takeover, with leases of 300 ms:
// slow, on nodes[0], whose renewals fail (noRenewals), and fast, on
// nodes[1], whose duplicates wait (10 s at most) for slow's lease to run
// out and then take the key over.
func takeoverGuards(t *testing.T, nodes []node) (slow, fast *middleware.Guard) {
	t.Helper()
	const lease = 300 * time.Millisecond
	slow, err := middleware.New(noRenewals{nodes[0].store}, middleware.WithLeaseTTL(lease), middleware.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	fast, err = middleware.New(nodes[1].store, middleware.WithLeaseTTL(lease), middleware.WithLogger(discard()),
		middleware.WithWaitBudget(10*time.Second), fastWaits)
	if err != nil {
		t.Fatal(err)
	}
	return slow, fast
}

// TestTxTakeover: a node's lease runs out while its work runs; another
// node claims the key, runs the work and commits. The first node's work,
// which wrote its row in its transaction and then returned, fails
// (Unavailable, its lease lost) and its row is not there: the key has the
// second node's row alone, and replays the second node's outcome.
func TestTxTakeover(t *testing.T) {
	t.Parallel()
	nodes, admin, orders := txCluster(t, 2)
	ctx := t.Context()
	slow, fast := takeoverGuards(t, nodes)
	inserted, secondDone := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, _, err := middleware.Do(ctx, slow, "k", "payload", func(ctx context.Context) (string, error) {
			if err := insertOrder(ctx, orders, "first"); err != nil {
				return "", err
			}
			close(inserted)
			// Sleeps past its lease, ignoring its ctx, until the other
			// node has run the work and committed.
			select {
			case <-secondDone:
			case <-time.After(20 * time.Second):
			}
			return "first", nil
		})
		first <- err
	}()
	<-inserted
	v, replayed, err := middleware.Do(ctx, fast, "k", "payload", func(ctx context.Context) (string, error) {
		return "second", insertOrder(ctx, orders, "second")
	})
	close(secondDone)
	if err != nil || replayed || v != "second" {
		t.Fatalf("the second node: %q, replayed %v, %v; want it to take over and run", v, replayed, err)
	}
	err = <-first
	var unavailable *middleware.UnavailableError
	if !errors.As(err, &unavailable) || !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("the first node's call: %v; want Unavailable wrapping idemkit.ErrLeaseLost", err)
	}
	if who := orderRows(t, admin, orders, "k"); len(who) != 1 || who[0] != "second" {
		t.Fatalf("rows of k: %v; want the second node's alone", who)
	}
	v, replayed, err = middleware.Do(ctx, fast, "k", "payload", func(ctx context.Context) (string, error) {
		t.Error("a replay ran the work")
		return "", nil
	})
	if err != nil || !replayed || v != "second" {
		t.Fatalf("the replay: %q, replayed %v, %v; want the second node's outcome", v, replayed, err)
	}
}

// TestTxLeaseLostWithoutTakeover: a node's renewals fail until its lease
// runs out while its work, which wrote its row in its transaction, waits
// for its ctx; nobody claims the key meanwhile. The call fails
// (Unavailable, its lease lost) instead of committing, the hooks see the
// loss once and the outcome unavailable, the row is not there, and the
// claim, run out (a run-out claim is not released), is no longer live: a
// retry runs at once and commits one row.
func TestTxLeaseLostWithoutTakeover(t *testing.T) {
	t.Parallel()
	nodes, admin, orders := txCluster(t, 1)
	ctx := t.Context()
	var (
		mu     sync.Mutex
		events []middleware.Event
	)
	hook := middleware.HookFunc(func(_ context.Context, e middleware.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	})
	slow, err := middleware.New(noRenewals{nodes[0].store}, middleware.WithLeaseTTL(300*time.Millisecond),
		middleware.WithLogger(discard()), middleware.WithHook(hook))
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := middleware.Do(ctx, slow, "k", "payload", func(ctx context.Context) (string, error) {
		if err := insertOrder(ctx, orders, "first"); err != nil {
			return "", err
		}
		<-ctx.Done()
		if cause := context.Cause(ctx); !errors.Is(cause, idemkit.ErrLeaseLost) {
			t.Errorf("the work's ctx ended with %v; want idemkit.ErrLeaseLost", cause)
		}
		return "first", nil
	})
	var unavailable *middleware.UnavailableError
	if !errors.As(err, &unavailable) || !errors.Is(err, idemkit.ErrLeaseLost) || v != "" {
		t.Fatalf("the call whose lease was lost: %q, %v; want no value and Unavailable wrapping idemkit.ErrLeaseLost", v, err)
	}
	mu.Lock()
	lost := 0
	for _, e := range events {
		if e.Kind == middleware.EventLeaseLost {
			lost++
		}
	}
	last := events[len(events)-1]
	mu.Unlock()
	if lost != 1 || last.Kind != middleware.EventUnavailable || !errors.Is(last.Err, idemkit.ErrLeaseLost) {
		t.Fatalf("events: %d lease-lost, outcome %v (%v); want one lease-lost and the outcome unavailable with idemkit.ErrLeaseLost", lost, last.Kind, last.Err)
	}
	if who := orderRows(t, admin, orders, "k"); len(who) != 0 {
		t.Fatalf("rows of k: %v; want none (rolled back)", who)
	}
	if rec, live, err := nodes[0].store.Get(ctx, "idempotency::k"); err != nil || live {
		t.Fatalf("the record: %+v, %v, %v; want none live", rec, live, err)
	}
	for i, want := range []bool{false, true} {
		v, replayed, err := middleware.Do(ctx, nodes[0].guard, "k", "payload", func(ctx context.Context) (string, error) {
			return "second", insertOrder(ctx, orders, "second")
		}, middleware.WaitBudget(0))
		if err != nil || replayed != want || v != "second" {
			t.Fatalf("retry %d: %q, replayed %v, %v; want replayed %v", i, v, replayed, err, want)
		}
	}
	if who := orderRows(t, admin, orders, "k"); len(who) != 1 || who[0] != "second" {
		t.Fatalf("rows of k after the retry: %v; want the retry's alone", who)
	}
}

// TestTxTakeoverWaitsOnUniqueRow: with a unique constraint on the
// business table, the node that took a key over blocks in its insert on
// the first holder's uncommitted row until the first holder's work
// returns; that holder's transaction then rolls back (its lease was lost),
// and the taker's insert goes on and commits: one row, the taker's.
func TestTxTakeoverWaitsOnUniqueRow(t *testing.T) {
	t.Parallel()
	nodes, admin, _ := txCluster(t, 2)
	ctx := t.Context()
	unique := strings.TrimSuffix(tableOf(nodes[0].store), `"records"`) + `"unique_orders"`
	if _, err := admin.Exec(ctx, `CREATE TABLE `+unique+` (id bigserial PRIMARY KEY, key text NOT NULL UNIQUE, who text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	slow, fast := takeoverGuards(t, nodes)
	inserted, release := make(chan struct{}), make(chan struct{})
	first, second := make(chan error, 1), make(chan error, 1)
	go func() {
		_, _, err := middleware.Do(ctx, slow, "k", "payload", func(ctx context.Context) (string, error) {
			err := insertOrder(ctx, unique, "first")
			close(inserted)
			<-release // past its lease, ignoring its ctx
			return "first", err
		})
		first <- err
	}()
	<-inserted
	go func() {
		_, _, err := middleware.Do(ctx, fast, "k", "payload", func(ctx context.Context) (string, error) {
			return "second", insertOrder(ctx, unique, "second")
		})
		second <- err
	}()
	// The taker claims once the first lease ran out, and its insert
	// waits for the first holder's row.
	for deadline := time.Now().Add(10 * time.Second); ; {
		var waiting int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0 AND query LIKE 'INSERT%'`, unique).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the taker's insert never waited for the first holder's row")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-second:
		t.Fatalf("the taker returned (%v) while the first holder's row was uncommitted", err)
	default:
	}
	close(release)
	if err := <-first; !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("the first holder: %v; want idemkit.ErrLeaseLost", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("the taker: %v; want its insert to go on once the first holder rolled back", err)
	}
	if who := orderRows(t, admin, unique, "k"); len(who) != 1 || who[0] != "second" {
		t.Fatalf("rows of k: %v; want the taker's alone", who)
	}
}

// TestTxExactlyOnceAcrossNodes races 32 goroutines over 4 guards, each
// with its own pool, on each of 20 keys, every one inserting its row in
// the work's transaction: every key ends with exactly one row.
func TestTxExactlyOnceAcrossNodes(t *testing.T) {
	t.Parallel()
	nodes, admin, orders := txCluster(t, 4, fastWaits,
		middleware.WithWaitBudget(20*time.Second))
	ctx := t.Context()
	const keys, callers = 20, 32
	var runs atomic.Int64
	for k := range keys {
		key := fmt.Sprint("race-", k)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				v, _, err := middleware.Do(ctx, nodes[i%len(nodes)].guard, key, "payload", func(ctx context.Context) (string, error) {
					runs.Add(1)
					return key, insertOrder(ctx, orders, fmt.Sprint("caller-", i))
				})
				if err != nil || v != key {
					t.Errorf("%s, caller %d: %q, %v", key, i, v, err)
				}
			})
		}
		wg.Wait()
		if who := orderRows(t, admin, orders, key); len(who) != 1 {
			t.Fatalf("rows of %s: %v; want exactly one", key, who)
		}
	}
	if runs.Load() != keys {
		t.Fatalf("%d executions for %d keys", runs.Load(), keys)
	}
}

// TestTxThroughHTTP: through nethttp on a real listener, a handler that
// writes its order in the transaction gets its response sent only once it
// committed; a transaction that cannot commit (a statement in it failed)
// answers 503 with none of the handler's headers, leaves no row and lets
// the retry run again. A response that cannot be replayed is delivered
// whole and commits with its row as executed-not-replayable, and its
// retry gets 409 without running the handler: a streamed (flushed) one,
// one over nethttp's WithMaxResponseBytes, and one within it but over the
// store's WithMaxResponseBytes (the guard records it not replayable when
// the store refuses it as too large).
func TestTxThroughHTTP(t *testing.T) {
	t.Parallel()
	nodes, admin, orders := txCluster(t, 1)
	const captureLimit, storeLimit = 4 << 10, 1 << 10
	small, err := New(nodes[0].pool, WithTable(nodes[0].store.cfg.tableName), WithMaxResponseBytes(storeLimit), WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	g, err := middleware.New(small, middleware.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	var breakTx atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if err := insertOrder(ctx, orders, "http"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if breakTx.Load() {
			tx, _ := Tx(ctx)
			_, _ = tx.Exec(ctx, `SELECT 1/0`) // the transaction is aborted; the handler does not notice
		}
		w.Header().Set("Location", "/orders/1")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":1}`)
		if pad, _ := strconv.Atoi(r.URL.Query().Get("pad")); pad > 0 {
			_, _ = io.WriteString(w, strings.Repeat(" ", pad))
		}
		if r.URL.Query().Get("stream") != "" {
			w.(http.Flusher).Flush()
		}
	})
	mw, err := nethttp.New(g, nethttp.WithMaxResponseBytes(captureLimit))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(mw(mux))
	defer ts.Close()
	post := func(key, query string) (*http.Response, string) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, ts.URL+"/orders"+query, strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	resp, body := post("h1", "")
	if resp.StatusCode != http.StatusCreated || body != `{"id":1}` || resp.Header.Get("Location") != "/orders/1" {
		t.Fatalf("first: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	resp, body = post("h1", "")
	if resp.StatusCode != http.StatusCreated || body != `{"id":1}` || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if who := orderRows(t, admin, orders, "h1"); len(who) != 1 {
		t.Fatalf("rows of h1: %v; want one", who)
	}

	breakTx.Store(true)
	resp, body = post("h2", "")
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "transaction-failed") || resp.Header.Get("Location") != "" || strings.Contains(body, `"id"`) {
		t.Fatalf("a transaction that cannot commit: %d %q %v; want a 500 %s problem without the handler's answer", resp.StatusCode, body, resp.Header, "transaction-failed")
	}
	if who := orderRows(t, admin, orders, "h2"); len(who) != 0 {
		t.Fatalf("rows of h2 after the failed commit: %v; want none", who)
	}
	breakTx.Store(false)
	resp, body = post("h2", "")
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the retry of h2: %d %q %v; want a new execution", resp.StatusCode, body, resp.Header)
	}
	if who := orderRows(t, admin, orders, "h2"); len(who) != 1 {
		t.Fatalf("rows of h2 after the retry: %v; want one", who)
	}

	// Over the capture limit, a held response is not sent at all: its
	// transaction is rolled back (TestTxResponseOverLimitRolledBack).
	resp, body = post("h4", fmt.Sprint("?pad=", 2*captureLimit))
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "transaction-response-too-large") {
		t.Fatalf("a response over the capture limit: %d %q; want 500 %s", resp.StatusCode, body, "transaction-response-too-large")
	}
	if who := orderRows(t, admin, orders, "h4"); len(who) != 0 {
		t.Fatalf("rows of the response over the capture limit: %v; want none", who)
	}
	for _, c := range []struct {
		name, key, query string
		size             int // of the body
	}{
		{"streamed", "h3", "?stream=1", len(`{"id":1}`)},
		{"over the store's limit", "h5", fmt.Sprint("?pad=", 2*storeLimit), len(`{"id":1}`) + 2*storeLimit},
	} {
		resp, body = post(c.key, c.query)
		if resp.StatusCode != http.StatusCreated || len(body) != c.size || !strings.HasPrefix(body, `{"id":1}`) {
			t.Fatalf("%s: %d, %d bytes; want the handler's 201 with its %d bytes", c.name, resp.StatusCode, len(body), c.size)
		}
		resp, body = post(c.key, c.query)
		if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "response-not-replayable") {
			t.Fatalf("the retry of a response %s: %d %q; want 409 %s", c.name, resp.StatusCode, body, "response-not-replayable")
		}
		if who := orderRows(t, admin, orders, c.key); len(who) != 1 {
			t.Fatalf("rows of the response %s: %v; want one", c.name, who)
		}
	}
}

// TestTxUnencodableValueThroughDo: work run by middleware.Do that writes
// its row in the transaction and returns a value encoding/json cannot
// encode (a chan field, an infinite float) gets its value back, and its
// row commits with the record as executed-not-replayable: a retry gets
// ErrNotReplayable without running the work, and the key has one row.
func TestTxUnencodableValueThroughDo(t *testing.T) {
	t.Parallel()
	nodes, admin, orders := txCluster(t, 1)
	g := nodes[0].guard
	ctx := t.Context()
	for key, value := range map[string]any{
		"chan-field": struct{ C chan int }{make(chan int)},
		"infinity":   math.Inf(1),
	} {
		v, replayed, err := middleware.Do(ctx, g, key, "payload", func(ctx context.Context) (any, error) {
			return value, insertOrder(ctx, orders, "first")
		})
		if err != nil || replayed || v != value {
			t.Fatalf("%s: %v, replayed %v, %v; want the work's value", key, v, replayed, err)
		}
		v, _, err = middleware.Do(ctx, g, key, "payload", func(ctx context.Context) (any, error) {
			t.Errorf("%s: the retry ran the work", key)
			return nil, insertOrder(ctx, orders, "retry")
		})
		if !errors.Is(err, middleware.ErrNotReplayable) || v != nil {
			t.Fatalf("%s: the retry: %v, %v; want ErrNotReplayable", key, v, err)
		}
		if who := orderRows(t, admin, orders, key); len(who) != 1 {
			t.Fatalf("rows of %s: %v; want one", key, who)
		}
		rec, ok, err := nodes[0].store.Get(ctx, "idempotency::"+key)
		if err != nil || !ok || rec.State != store.StateNotReplayable {
			t.Fatalf("the record of %s: %+v, %v, %v; want executed-not-replayable", key, rec, ok, err)
		}
	}
}

// TestTxSealed: through store.Seal, the work commits a sealed response,
// and the replay opens it.
func TestTxSealed(t *testing.T) {
	t.Parallel()
	nodes, admin, orders := txCluster(t, 1)
	sealed, err := store.Seal(nodes[0].store, store.SealKey{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	g, err := middleware.New(sealed, middleware.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for i := range 2 {
		v, replayed, err := middleware.Do(ctx, g, "s", "payload", func(ctx context.Context) (string, error) {
			return "secret", insertOrder(ctx, orders, "sealed")
		})
		if err != nil || v != "secret" || replayed != (i == 1) {
			t.Fatalf("call %d: %q, replayed %v, %v", i, v, replayed, err)
		}
	}
	if who := orderRows(t, admin, orders, "s"); len(who) != 1 {
		t.Fatalf("rows: %v; want one", who)
	}
	var response []byte
	if err := admin.QueryRow(ctx, `SELECT response FROM `+tableOf(nodes[0].store)+` WHERE key = 'idempotency::s'`).Scan(&response); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(response), "secret") {
		t.Fatal("the stored response is not sealed")
	}
}
