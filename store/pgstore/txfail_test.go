package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// txHTTP serves handler behind nethttp's middleware on guard g, and
// returns a function that posts to it with an Idempotency-Key.
func txHTTP(t *testing.T, g *middleware.Guard, handler http.HandlerFunc, opts ...nethttp.Option) func(key string) (*http.Response, string) {
	t.Helper()
	mw, err := nethttp.New(g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(mw(handler))
	t.Cleanup(ts.Close)
	return func(key string) (*http.Response, string) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, ts.URL+"/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return &http.Response{}, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
}

// problemType returns the "type" of a problem body.
func problemType(body string) string {
	var p struct{ Type string }
	_ = json.Unmarshal([]byte(body), &p)
	return p.Type
}

// txStoreOn returns a store on pool over the table of s, with opts.
func txStoreOn(t *testing.T, pool *pgxpool.Pool, s *Store, opts ...Option) *Store {
	t.Helper()
	st, err := New(pool, append([]Option{WithTable(s.cfg.tableName), WithLogger(discard())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestTxFailuresAnsweredAsWhatTheyAre: the handler's transaction failing
// at its commit is not the idempotency backend failing. A transaction left
// aborted by a statement the handler let fail (25P02) and one whose
// deferred foreign key fails at COMMIT (23503) are answered 500
// transaction-failed; one that loses a serialization conflict at COMMIT
// (40001, a write skew under SERIALIZABLE) is answered 409
// transaction-conflict with Retry-After. Each is logged with its cause
// through the guard's logger, nothing of it is kept, and its claim is
// released: the retry runs the handler again, and commits.
func TestTxFailuresAnsweredAsWhatTheyAre(t *testing.T) {
	t.Parallel()
	nodes, admin, orders := txCluster(t, 1)
	ctx := t.Context()
	base := strings.TrimSuffix(orders, `"orders"`)
	parents, children, skew := base+`"parents"`, base+`"children"`, base+`"skew"`
	for _, ddl := range []string{
		`CREATE TABLE ` + parents + ` (id int PRIMARY KEY)`,
		`CREATE TABLE ` + children + ` (id serial PRIMARY KEY, parent int NOT NULL REFERENCES ` + parents + ` (id) DEFERRABLE INITIALLY DEFERRED)`,
		`CREATE TABLE ` + skew + ` (side text NOT NULL)`,
	} {
		if _, err := admin.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	s := txStoreOn(t, nodes[0].pool, nodes[0].store, WithTxIsolation(pgx.Serializable))
	var logs guardtest.Log
	g, err := middleware.New(s, middleware.WithLogger(logs.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	var mode atomic.Value
	mode.Store("")
	var runs atomic.Int64
	post := txHTTP(t, g, func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		runs.Add(1)
		if err := insertOrder(ctx, orders, "http"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		tx, _ := Tx(ctx)
		switch mode.Load() {
		case "aborted":
			// The handler handles the failure of a statement by going
			// on: its transaction is aborted.
			if _, err := tx.Exec(ctx, `SELECT 1/0`); err == nil {
				t.Error("SELECT 1/0 succeeded")
			}
		case "deferred":
			// Checked at COMMIT only.
			if _, err := tx.Exec(ctx, `INSERT INTO `+children+` (parent) VALUES (42)`); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		case "skew":
			// A write skew with a concurrent SERIALIZABLE transaction
			// that commits first: this one's COMMIT fails.
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+skew+` WHERE side = 'b'`).Scan(&n); err != nil {
				t.Error(err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+skew+` (side) VALUES ('a')`); err != nil {
				t.Error(err)
			}
			other, err := admin.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
			if err != nil {
				t.Error(err)
				break
			}
			if err := other.QueryRow(ctx, `SELECT count(*) FROM `+skew+` WHERE side = 'a'`).Scan(&n); err != nil {
				t.Error(err)
			}
			if _, err := other.Exec(ctx, `INSERT INTO `+skew+` (side) VALUES ('b')`); err != nil {
				t.Error(err)
			}
			if err := other.Commit(ctx); err != nil {
				t.Errorf("the concurrent transaction: %v", err)
			}
		}
		w.Header().Set("Location", "/orders/1")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":1}`)
	})

	for _, c := range []struct {
		mode, key  string
		status     int
		problem    string
		retryAfter bool
		sqlstate   string
		level      string
	}{
		{"aborted", "f1", http.StatusInternalServerError, "transaction-failed", false, "25P02", "ERROR"},
		{"deferred", "f2", http.StatusInternalServerError, "transaction-failed", false, "23503", "ERROR"},
		{"skew", "f3", http.StatusConflict, "transaction-conflict", true, "40001", "WARN"},
	} {
		mode.Store(c.mode)
		before := runs.Load()
		resp, body := post(c.key)
		if resp.StatusCode != c.status || !strings.HasSuffix(problemType(body), c.problem) ||
			(resp.Header.Get("Retry-After") != "") != c.retryAfter || resp.Header.Get("Location") != "" {
			t.Fatalf("%s: %d %v %q; want %d %s without the handler's answer", c.mode, resp.StatusCode, resp.Header, body, c.status, c.problem)
		}
		var line string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "SQLSTATE "+c.sqlstate) {
				line = l
			}
		}
		if line == "" || !strings.Contains(line, `"level":"`+c.level+`"`) || !strings.Contains(line, "transaction") {
			t.Fatalf("%s: no %s log line of the guard naming SQLSTATE %s; the log:\n%s", c.mode, c.level, c.sqlstate, logs.String())
		}
		if who := orderRows(t, admin, orders, c.key); len(who) != 0 {
			t.Fatalf("%s: rows %v; want none", c.mode, who)
		}
		mode.Store("")
		resp, body = post(c.key)
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" || runs.Load() != before+2 {
			t.Fatalf("%s: the retry: %d %q %v, %d runs; want a second execution", c.mode, resp.StatusCode, body, resp.Header, runs.Load()-before)
		}
		if who := orderRows(t, admin, orders, c.key); len(who) != 1 {
			t.Fatalf("%s: rows after the retry %v; want one", c.mode, who)
		}
	}
}

// TestTxSerializableHolderCommitsWithWaitingDuplicates: waiting
// duplicates on other nodes, which mark the holder's claim as waited for
// and poll its record while the holder's SERIALIZABLE (and REPEATABLE
// READ) transaction is open, never make its commit fail: the holder
// answers 201, every duplicate replays it, and the key has one row.
func TestTxSerializableHolderCommitsWithWaitingDuplicates(t *testing.T) {
	t.Parallel()
	for _, iso := range []pgx.TxIsoLevel{pgx.Serializable, pgx.RepeatableRead} {
		t.Run(string(iso), func(t *testing.T) {
			t.Parallel()
			const dupNodes, dupsPerNode = 4, 8
			srv := testenv.Postgres(t)
			admin := newPool(t, srv.URL, 2)
			opt := table(t, admin)
			marks := &statementsLike{like: `SET response = '\x01'`}
			posts := make([]func(string) (*http.Response, string), 1+dupNodes)
			var runs atomic.Int64
			var orders string
			release, inserted := make(chan struct{}), make(chan struct{})
			var snapshot sync.Once
			for i := range posts {
				pool := newPool(t, srv.URL, 8, traced(&statements{}), func(c *pgxpool.Config) {
					if i > 0 {
						c.ConnConfig.Tracer = marks
					}
				})
				s, err := New(pool, opt, WithTxIsolation(iso), WithLogger(discard()))
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					orders = ordersTable(t, admin, s)
				}
				g, err := middleware.New(s, middleware.WithLogger(discard()), middleware.WithWaitBudget(time.Minute), fastWaits)
				if err != nil {
					t.Fatal(err)
				}
				posts[i] = txHTTP(t, g, func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1)
					if err := insertOrder(r.Context(), orders, "holder"); err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
					snapshot.Do(func() { close(inserted) }) // the transaction's snapshot is taken
					<-release
					w.WriteHeader(http.StatusCreated)
					_, _ = io.WriteString(w, `{"id":1}`)
				})
			}
			holder := make(chan int, 1)
			go func() {
				resp, _ := posts[0]("k")
				holder <- resp.StatusCode
			}()
			<-inserted
			var wg sync.WaitGroup
			statuses := make(chan string, dupNodes*dupsPerNode)
			for i := 1; i <= dupNodes; i++ {
				for range dupsPerNode {
					wg.Go(func() {
						resp, body := posts[i]("k")
						statuses <- resp.Status + " " + resp.Header.Get("Idempotent-Replayed") + " " + body
					})
				}
			}
			// Every duplicate node has marked (or tried to mark) the claim
			// while the holder's transaction is open, then polled it.
			for deadline := time.Now().Add(time.Minute); marks.n.Load() < dupNodes; {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d duplicate nodes marked the claim", marks.n.Load(), dupNodes)
				}
				time.Sleep(time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond) // let the duplicates poll the claim too
			close(release)
			if got := <-holder; got != http.StatusCreated {
				t.Fatalf("the holder: %d; want 201", got)
			}
			wg.Wait()
			close(statuses)
			for s := range statuses {
				if s != `201 Created true {"id":1}` {
					t.Fatalf("a duplicate: %q; want the holder's 201 replayed", s)
				}
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("the handler ran %d times; want once", n)
			}
			if who := orderRows(t, admin, orders, "k"); len(who) != 1 {
				t.Fatalf("rows %v; want one", who)
			}
		})
	}
}

// statementsLike counts the statements whose SQL contains like (a pgx
// QueryTracer).
type statementsLike struct {
	like string
	n    atomic.Int64
}

func (s *statementsLike) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, s.like) {
		s.n.Add(1)
	}
	return ctx
}

func (s *statementsLike) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestTxRenewalsDoNotStarveBehindTheirWork: on a pool of two connections,
// two transactional handlers that run past their lease (so their claims
// must be renewed) both hold a connection of the pool for their
// transactions; their renewals do not wait behind them, and both answer
// 201 with their rows committed. A third request, which finds no
// connection free within the guard's op timeout, is refused, and the
// store's log says the pool is too small, naming MaxConns.
func TestTxRenewalsDoNotStarveBehindTheirWork(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opt := table(t, admin)
	pool := newPool(t, srv.URL, 2)
	var storeLogs guardtest.Log
	s, err := New(pool, opt, WithLogger(storeLogs.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	orders := ordersTable(t, admin, s)
	g, err := middleware.New(s, middleware.WithLogger(discard()), middleware.WithLeaseTTL(lease), middleware.WithOpTimeout(lease))
	if err != nil {
		t.Fatal(err)
	}
	var begun sync.WaitGroup
	begun.Add(2)
	third := make(chan struct{})
	post := txHTTP(t, g, func(w http.ResponseWriter, r *http.Request) {
		err := insertOrder(r.Context(), orders, "long")
		begun.Done()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		<-third
		// Past three leases: renewals are due all along.
		select {
		case <-time.After(3 * lease):
		case <-r.Context().Done():
			http.Error(w, context.Cause(r.Context()).Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	var wg sync.WaitGroup
	results := make([]string, 2)
	for i, key := range []string{"long-1", "long-2"} {
		wg.Go(func() {
			resp, body := post(key)
			results[i] = resp.Status + " " + body
		})
	}
	begun.Wait()
	resp, body := post("third")
	close(third)
	wg.Wait()
	for i, r := range results {
		if r != "201 Created " {
			t.Errorf("long request %d: %q; want 201", i+1, r)
		}
	}
	for _, key := range []string{"long-1", "long-2"} {
		if who := orderRows(t, admin, orders, key); len(who) != 1 {
			t.Errorf("rows of %s: %v; want one", key, who)
		}
	}
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("the third request: %d %q; want 503", resp.StatusCode, body)
	}
	if l := storeLogs.String(); !strings.Contains(l, "pool is too small") || !strings.Contains(l, "MaxConns") {
		t.Errorf("the store's log does not name the pool as too small: %q", l)
	}
}

// TestTxResponseOverLimitRolledBack: a transactional handler whose
// response outgrows the response limit (the most held until the commit)
// has its writes refused past the limit, so that memory stays bounded;
// its transaction is rolled back and the client is answered 500
// transaction-response-too-large, never the handler's 201. Nothing is
// kept, and a smaller answer on retry commits.
func TestTxResponseOverLimitRolledBack(t *testing.T) {
	t.Parallel()
	nodes, admin, orders := txCluster(t, 1)
	const limit = 4 << 10
	var logs guardtest.Log
	nhOpts := []nethttp.Option{nethttp.WithMaxResponseBytes(limit), nethttp.WithLogger(logs.Logger())}
	var big atomic.Bool
	big.Store(true)
	var accepted, refused atomic.Int64
	post := txHTTP(t, nodes[0].guard, func(w http.ResponseWriter, r *http.Request) {
		if err := insertOrder(r.Context(), orders, "http"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		chunk := bytes.Repeat([]byte("x"), 1<<10)
		n := 1
		if big.Load() {
			n = 64 * limit / len(chunk)
		}
		for range n {
			k, err := w.Write(chunk)
			accepted.Add(int64(k))
			if err != nil {
				refused.Add(1)
				return // as io.Copy would
			}
		}
	}, nhOpts...)
	resp, body := post("big")
	if resp.StatusCode != http.StatusInternalServerError || !strings.HasSuffix(problemType(body), "transaction-response-too-large") {
		t.Fatalf("an oversized held response: %d %q; want 500 %s", resp.StatusCode, body, "transaction-response-too-large")
	}
	if accepted.Load() > limit || refused.Load() != 1 {
		t.Fatalf("the handler's writes: %d bytes accepted, %d refused; want at most %d accepted, then a refusal", accepted.Load(), refused.Load(), limit)
	}
	if who := orderRows(t, admin, orders, "big"); len(who) != 0 {
		t.Fatalf("rows of the rolled-back request: %v; want none", who)
	}
	if !strings.Contains(logs.String(), "rolled back") {
		t.Fatalf("nothing logged: %q", logs.String())
	}
	big.Store(false)
	resp, body = post("big")
	if resp.StatusCode != http.StatusCreated || len(body) != 1<<10 {
		t.Fatalf("the retry: %d, %d bytes; want 201", resp.StatusCode, len(body))
	}
	if who := orderRows(t, admin, orders, "big"); len(who) != 1 {
		t.Fatalf("rows after the retry: %v; want one", who)
	}
}

// TestTxRepeatableReadPastARenewalSaysSo: a REPEATABLE READ transaction
// whose work runs past a renewal of its claim's lease (which changes the
// record's row after the transaction's snapshot) cannot write its
// outcome: the call is answered 500 transaction-failed, not 503 nor a
// conflict a retry would meet again, and the guard's log names the fix
// (the lease TTL). Nothing is kept.
func TestTxRepeatableReadPastARenewalSaysSo(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	nodes, admin, orders := txCluster(t, 1)
	s := txStoreOn(t, nodes[0].pool, nodes[0].store, WithTxIsolation(pgx.RepeatableRead))
	var logs guardtest.Log
	g, err := middleware.New(s, middleware.WithLogger(logs.Logger()), middleware.WithLeaseTTL(lease))
	if err != nil {
		t.Fatal(err)
	}
	post := txHTTP(t, g, func(w http.ResponseWriter, r *http.Request) {
		if err := insertOrder(r.Context(), orders, "http"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		time.Sleep(lease / 2) // past the first renewal, at a third of the lease
		w.WriteHeader(http.StatusCreated)
	})
	resp, body := post("rr")
	if resp.StatusCode != http.StatusInternalServerError || !strings.HasSuffix(problemType(body), "transaction-failed") {
		t.Fatalf("%d %q; want 500 %s", resp.StatusCode, body, "transaction-failed")
	}
	if l := logs.String(); !strings.Contains(l, "WithLeaseTTL") || !strings.Contains(l, "REPEATABLE READ") {
		t.Fatalf("the guard's log does not name the cause: %q", l)
	}
	if who := orderRows(t, admin, orders, "rr"); len(who) != 0 {
		t.Fatalf("rows %v; want none", who)
	}
}
