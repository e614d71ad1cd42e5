package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
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
	srv := testenv.Postgres(t)
	nodes := cluster(t, srv.URL, 2, testenv.Name(t), middleware.WithLogger(discard()))
	admin := newPool(t, srv.URL, 2)
	orders := ordersTable(t, admin, nodes[0].store)
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
// nothing be recorded, or returns a verdict that stores nothing leaves no
// row and no record; its retry runs again, and commits.
func TestTxRolledBackWithoutOutcome(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	nodes := cluster(t, srv.URL, 1, testenv.Name(t), middleware.WithLogger(discard()))
	admin := newPool(t, srv.URL, 2)
	orders := ordersTable(t, admin, nodes[0].store)
	g := nodes[0].guard
	for _, c := range []struct {
		name string
		work func(ctx context.Context) (middleware.Result, error)
	}{
		{"error", func(ctx context.Context) (middleware.Result, error) {
			if err := insertOrder(ctx, orders, "failed"); err != nil {
				return middleware.Result{}, err
			}
			return middleware.Result{}, errors.New("declined")
		}},
		{"panic", func(ctx context.Context) (middleware.Result, error) {
			if err := insertOrder(ctx, orders, "failed"); err != nil {
				return middleware.Result{}, err
			}
			panic("boom")
		}},
		{"forget", func(ctx context.Context) (middleware.Result, error) {
			if err := insertOrder(ctx, orders, "failed"); err != nil {
				return middleware.Result{}, err
			}
			return middleware.Result{Value: []byte("500"), Verdict: middleware.Forget}, nil
		}},
		{"do-not-record", func(ctx context.Context) (middleware.Result, error) {
			if err := insertOrder(ctx, orders, "failed"); err != nil {
				return middleware.Result{}, err
			}
			middleware.DoNotRecord(ctx)
			return middleware.Result{Value: []byte("v")}, nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			key := "rollback-" + c.name
			func() {
				defer func() { _ = recover() }()
				_, _ = g.Execute(ctx, key, fpOf("p"), c.work)
			}()
			if who := orderRows(t, admin, orders, key); len(who) != 0 {
				t.Fatalf("rows after the work %s: %v; want none", c.name, who)
			}
			out, err := g.Execute(ctx, key, fpOf("p"), func(ctx context.Context) (middleware.Result, error) {
				return middleware.Result{Value: []byte("second")}, insertOrder(ctx, orders, "second")
			})
			if err != nil || out.Replayed || string(out.Value) != "second" {
				t.Fatalf("the retry: %+v, %v; want a second execution", out, err)
			}
			if who := orderRows(t, admin, orders, key); len(who) != 1 || who[0] != "second" {
				t.Fatalf("rows after the retry: %v; want the second execution's", who)
			}
		})
	}
}

// noRenewals is a store whose lease extensions fail, as they would for a
// process cut off from the database while its work runs: the claim's
// lease runs out, and another node may take the key over.
type noRenewals struct{ *Store }

func (noRenewals) Extend(context.Context, string, lock.Fence, time.Duration) (bool, error) {
	return false, errors.New("the database cannot be reached")
}

// TestTxTakeover: a node's lease runs out while its work runs; another
// node claims the key, runs the work and commits. The first node's work,
// which wrote its row in its transaction and then returned, fails
// (Unavailable, its lease lost) and its row is not there: the key has the
// second node's row alone, and replays the second node's outcome.
func TestTxTakeover(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	nodes := cluster(t, srv.URL, 2, testenv.Name(t), middleware.WithLogger(discard()))
	admin := newPool(t, srv.URL, 2)
	orders := ordersTable(t, admin, nodes[0].store)
	ctx := t.Context()
	const lease = 300 * time.Millisecond
	slow, err := middleware.New(noRenewals{nodes[0].store}, middleware.WithLeaseTTL(lease), middleware.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	fast, err := middleware.New(nodes[1].store, middleware.WithLeaseTTL(lease), middleware.WithLogger(discard()),
		middleware.WithWaitBudget(10*time.Second), fastWaits)
	if err != nil {
		t.Fatal(err)
	}
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
	if !errors.As(err, &unavailable) || !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("the first node's call: %v; want Unavailable wrapping lock.ErrLeaseLost", err)
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

// TestTxExactlyOnceAcrossNodes races 32 goroutines over 4 guards, each
// with its own pool, on each of 20 keys, every one inserting its row in
// the work's transaction: every key ends with exactly one row.
func TestTxExactlyOnceAcrossNodes(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	nodes := cluster(t, srv.URL, 4, testenv.Name(t), middleware.WithLogger(discard()), fastWaits,
		middleware.WithWaitBudget(20*time.Second))
	admin := newPool(t, srv.URL, 2)
	orders := ordersTable(t, admin, nodes[0].store)
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
// the retry run again; a streamed (flushed) response commits as
// executed-not-replayable.
func TestTxThroughHTTP(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	nodes := cluster(t, srv.URL, 1, testenv.Name(t), middleware.WithLogger(discard()))
	admin := newPool(t, srv.URL, 2)
	orders := ordersTable(t, admin, nodes[0].store)
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
		if r.URL.Query().Get("stream") != "" {
			w.(http.Flusher).Flush()
		}
	})
	mw, err := nethttp.New(nodes[0].guard)
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
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Location") != "" || strings.Contains(body, `"id"`) {
		t.Fatalf("a transaction that cannot commit: %d %q %v; want a 503 problem without the handler's answer", resp.StatusCode, body, resp.Header)
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

	resp, body = post("h3", "?stream=1")
	if resp.StatusCode != http.StatusCreated || body != `{"id":1}` {
		t.Fatalf("streamed: %d %q", resp.StatusCode, body)
	}
	resp, _ = post("h3", "?stream=1")
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("the retry of a streamed response: %d; want 409 not replayable", resp.StatusCode)
	}
	if who := orderRows(t, admin, orders, "h3"); len(who) != 1 {
		t.Fatalf("rows of h3: %v; want one", who)
	}
}

// TestTxSealed: through store.Seal, the work commits a sealed response,
// and the replay opens it.
func TestTxSealed(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	nodes := cluster(t, srv.URL, 1, testenv.Name(t))
	admin := newPool(t, srv.URL, 2)
	orders := ordersTable(t, admin, nodes[0].store)
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
