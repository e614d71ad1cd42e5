package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/pgstore"
)

var txOnly = flag.Bool("tx", false,
	"TestTx: run the transactional-mode scenario alone, sized by -duration, and print its table (to compare two checkouts)")

const (
	// txRounds is how many interleaved rounds a full run makes; a short
	// run (no -report, no -tx) makes only the first.
	txRounds = 5
	// txPoolConns is the size of the scenario's PostgreSQL pool: as many
	// connections as the most clients (a request of this scenario uses one
	// at a time: its claim's, then its transaction's).
	txPoolConns = 32
)

// txClients are the numbers of concurrent HTTP clients.
var txClients = []int{1, 32}

// TxResult is one row of the transactional-mode scenario: a subject at a
// number of clients, over its rounds.
type TxResult struct {
	Result
	Requests   int64 // requests sent, warm-ups included
	Created    int64 // of them, answered 201 Created
	Statements int64 // statements the pool sent while they ran (BEGIN and COMMIT included)
	Rows       int64 // order rows the subject left in the database, at every number of clients
}

// StatementsPerRequest is the number of statements (round trips to
// PostgreSQL) a request cost, on average.
func (r TxResult) StatementsPerRequest() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.Statements) / float64(r.Requests)
}

// statementCounter is a pgx QueryTracer that counts every statement its
// pool sends: each Exec, Query and QueryRow, so BEGIN and COMMIT too.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestTx runs the transactional-mode scenario alone, sized by -duration,
// when given -tx (TestReport runs it with the others), to compare two
// checkouts side by side:
//
//	go test -count=1 -run '^TestTx$' -timeout 30m . -args -tx -duration=3s
func TestTx(t *testing.T) {
	if !*txOnly {
		t.Skip("TestReport runs this scenario; -tx runs it alone")
	}
	results := txScenarios(t, *duration)
	checkTx(t, results)
	var buf bytes.Buffer
	if err := WriteTx(&buf, results); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + buf.String())
}

// queryRower is what the order handler inserts through: the pool, or the
// guarded work's transaction.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// txSubject is one of the three configurations compared.
type txSubject struct {
	name    string
	who     string // its rows' who column
	handler http.Handler
}

// txScenarios measures first executions of an HTTP POST whose handler
// inserts one order row, through net/http on a real listener with a fresh
// Idempotency-Key per request, on one PostgreSQL pool: the bare handler
// (the row inserted on the pool, autocommit), the handler behind the
// nethttp middleware over pgstore (the row inserted on the pool), and
// behind the same middleware with the row inserted in pgstore.Tx (it
// commits with the record). Each number of clients runs in rounds, every
// subject once a round in an order that rotates from round to round, so
// that the drifts of a shared machine hit every row alike; a row adds up
// its rounds (its p50 is the median of theirs, its p99 the worst). A full
// run (-report or -tx) makes txRounds rounds of d/txRounds per row; a
// short one the first round only.
func txScenarios(t *testing.T, d time.Duration) []TxResult {
	ctx := t.Context()
	discard := slog.New(slog.DiscardHandler)
	counter := &statementCounter{}
	cfg, err := pgxpool.ParseConfig(testenv.Postgres(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = txPoolConns
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	name := testenv.Name(t)
	table := pgstore.WithTable(name + "_records")
	if err := pgstore.SetupSchema(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	orders := pgx.Identifier{name + "_orders"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+orders+` (id bigserial PRIMARY KEY, key text NOT NULL, who text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	// Every connection of the pool open before the first measured request.
	conns := make([]*pgxpool.Conn, txPoolConns)
	for i := range conns {
		if conns[i], err = pool.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range conns {
		c.Release()
	}

	s, err := pgstore.New(pool, table, pgstore.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	g, err := middleware.New(s, middleware.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	idem, err := nethttp.New(g, nethttp.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	onPool := func(context.Context) (queryRower, error) { return pool, nil }
	inTx := func(ctx context.Context) (queryRower, error) { return pgstore.Tx(ctx) }
	headerKey := func(r *http.Request) string { return r.Header.Get("Idempotency-Key") }
	callKey := func(r *http.Request) string {
		info, _ := middleware.CallInfoFrom(r.Context())
		return info.Key
	}
	subjects := []txSubject{
		{name: "bare handler (no guard), row on the pool", who: "bare", handler: orderInserter(orders, "bare", onPool, headerKey)},
		{name: "guard (PostgreSQL), row on the pool", who: "guard", handler: idem(orderInserter(orders, "guard", onPool, callKey))},
		{name: "guard (PostgreSQL), row in pgstore.Tx", who: "tx", handler: idem(orderInserter(orders, "tx", inTx, callKey))},
	}

	rounds := 1
	if *reportFile != "" || *txOnly {
		rounds = txRounds
	}
	body := `{"item":"book","quantity":1}`
	var results []TxResult
	for _, clients := range txClients {
		perSubject := make([][]Result, len(subjects))
		requests := make([]int64, len(subjects))
		created := make([]int64, len(subjects))
		statements := make([]int64, len(subjects))
		for round := range rounds {
			for k := range subjects {
				si := (k + round) % len(subjects)
				srv := httptest.NewServer(subjects[si].handler)
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}}
				keyPrefix := fmt.Sprint(name, "-", subjects[si].who, "-", clients, "-", round, "-")
				var sent, ok atomic.Int64
				before := counter.n.Load()
				r := Run(ctx, clients, d/txRounds, func(ctx context.Context, w, i int) error {
					req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/orders", strings.NewReader(body))
					if err != nil {
						return err
					}
					sent.Add(1)
					if err := postOrder(client, req, fmt.Sprint(keyPrefix, w, "-", i)); err != nil {
						return err
					}
					ok.Add(1)
					return nil
				})
				client.CloseIdleConnections()
				srv.Close() // waits for the handlers, so that every statement is counted
				statements[si] += counter.n.Load() - before
				requests[si] += sent.Load()
				created[si] += ok.Load()
				perSubject[si] = append(perSubject[si], r)
			}
		}
		for si, sub := range subjects {
			r := TxResult{Result: combine(perSubject[si]), Requests: requests[si], Created: created[si], Statements: statements[si]}
			r.Group, r.Subject, r.Mode = "PostgreSQL transactional mode", sub.name, "first executions"
			results = append(results, r)
		}
	}
	// The rows each subject left (at every number of clients), for
	// checkTx: one per 201.
	rows := map[string]int64{}
	for _, sub := range subjects {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+orders+` WHERE who = $1`, sub.who).Scan(&n); err != nil {
			t.Fatal(err)
		}
		rows[sub.name] = n
	}
	for i := range results {
		results[i].Rows = rows[results[i].Subject]
	}
	return results
}

// orderInserter returns the scenario's order handler: it inserts one row
// into orders, made under the request's idempotency key (as key finds it)
// by who, through what db returns for the request's context, and answers
// 201 Created with the row's id; a failed insert answers 500.
func orderInserter(orders, who string, db func(context.Context) (queryRower, error), key func(*http.Request) string) http.Handler {
	insert := `INSERT INTO ` + orders + ` (key, who) VALUES ($1, $2) RETURNING id`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		_, _ = io.Copy(io.Discard, r.Body)
		q, err := db(ctx)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		var id int64
		if err := q.QueryRow(ctx, insert, key(r), who).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", id))
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]int64{"order": id})
	})
}

// checkTx fails the test if a row completed no request, saw an error, or
// if the rows a subject left in the database are not exactly one per
// request it answered 201 (a lost or a doubled insert, or a transaction
// rolled back under a 201).
func checkTx(t *testing.T, results []TxResult) {
	t.Helper()
	created := map[string]int64{}
	rows := map[string]int64{}
	for _, r := range results {
		if r.Ops == 0 || r.Errors > 0 {
			t.Errorf("%s / %s / %d clients: %d requests, %d errors", r.Group, r.Subject, r.Workers, r.Ops, r.Errors)
		}
		created[r.Subject] += r.Created
		rows[r.Subject] = r.Rows
	}
	for subject, n := range created {
		if rows[subject] != n {
			t.Errorf("%s: %d order rows for %d requests answered 201", subject, rows[subject], n)
		}
	}
}

// WriteTx writes the transactional-mode scenario as a markdown table, each
// row's throughput also given as a ratio to the bare handler's at the same
// number of clients (the first row of that number).
func WriteTx(w io.Writer, results []TxResult) error {
	if _, err := fmt.Fprint(w, "\n### PostgreSQL: a first execution that inserts one row, bare, guarded, and in the guard's transaction (HTTP, keep-alive)\n\n"+
		"| subject | clients | ops/s | vs bare | p50 | p99 | errors | statements per request |\n"+
		"| --- | --- | --- | --- | --- | --- | --- | --- |\n"); err != nil {
		return err
	}
	base := map[int]float64{}
	for _, r := range results {
		if _, ok := base[r.Workers]; !ok {
			base[r.Workers] = r.OpsPerSec()
		}
		ratio := "—"
		if b := base[r.Workers]; b > 0 {
			ratio = fmt.Sprintf("%.2f×", r.OpsPerSec()/b)
		}
		if _, err := fmt.Fprintf(w, "| %s | %d | %.0f | %s | %s | %s | %d | %.2f |\n", r.Subject, r.Workers, r.OpsPerSec(), ratio,
			round(r.P50), round(r.P99), r.Errors, r.StatementsPerRequest()); err != nil {
			return err
		}
	}
	return nil
}
