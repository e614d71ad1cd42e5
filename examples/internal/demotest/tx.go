package demotest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/pgstore"
)

// TxBackend is a guard on a pgstore.Store whose record table is the
// test's own, on the shared PostgreSQL server, with an orders table beside
// it that handlers write in the guarded work's transaction (pgstore.Tx),
// and what the tests' handlers are told to do besides.
type TxBackend struct {
	Guard  *middleware.Guard
	Pool   *pgxpool.Pool
	Orders string // one row per order, with the key it was made under; no unique constraint, so a second execution shows

	Runs   atomic.Int64 // the calls of Insert: the handler's runs
	Fail   atomic.Bool  // HTTP handlers answer 500 once they inserted
	Stream atomic.Bool  // HTTP handlers flush their 201 (it cannot be replayed)
	Break  atomic.Bool  // Insert aborts the transaction after its row, so that it cannot commit
	Pad    atomic.Int64 // HTTP handlers add this many bytes to their JSON body (under "pad")
}

// NewTxBackend creates the tables and the guard, with a wait budget no
// duplicate outwaits on a slow machine: every duplicate gets the replay.
func NewTxBackend(t *testing.T) *TxBackend {
	t.Helper()
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, testenv.Postgres(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	name := testenv.Name(t)
	if err := pgstore.SetupSchema(ctx, pool, pgstore.WithTable(name)); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool, pgstore.WithTable(name), pgstore.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	orders := name + "_orders"
	if _, err := pool.Exec(ctx, `CREATE TABLE `+orders+` (id bigserial PRIMARY KEY, key text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	g, err := middleware.New(s, middleware.WithLogger(slog.New(slog.DiscardHandler)), middleware.WithWaitBudget(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return &TxBackend{Guard: g, Pool: pool, Orders: orders}
}

// Insert writes an order row for the guarded call of ctx, in its
// transaction, and counts the run. With Break set it then runs a
// statement that fails (SELECT 1/0) and ignores its error, as a handler
// that does not check might: the transaction is aborted, and its commit
// fails.
func (b *TxBackend) Insert(ctx context.Context) error {
	b.Runs.Add(1)
	tx, err := pgstore.Tx(ctx)
	if err != nil {
		return err
	}
	info, _ := middleware.CallInfoFrom(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO `+b.Orders+` (key) VALUES ($1)`, info.Key); err != nil {
		return err
	}
	if b.Break.Load() {
		_, _ = tx.Exec(ctx, `SELECT 1/0`)
	}
	return nil
}

// Rows counts the order rows of key.
func (b *TxBackend) Rows(t *testing.T, key string) int {
	t.Helper()
	var n int
	if err := b.Pool.QueryRow(t.Context(), `SELECT count(*) FROM `+b.Orders+` WHERE key = $1`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TxAnswer is what one POST got.
type TxAnswer struct {
	Status   int
	Replayed bool
	Header   http.Header
	Body     string
	Err      error
}

// TxPost posts an order with key to url on a connection of its own.
func TxPost(ctx context.Context, url, key string) TxAnswer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/orders", strings.NewReader(`{"item":"book"}`))
	if err != nil {
		return TxAnswer{Err: err}
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return TxAnswer{Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return TxAnswer{Status: resp.StatusCode, Replayed: resp.Header.Get("Idempotent-Replayed") == "true", Header: resp.Header, Body: string(body), Err: err}
}

// RunTxHTTP proves the transactional mode over HTTP: each check runs in
// a subtest with a [TxBackend] b of its own, and serve starts the service
// on b and returns its URL: behind the framework's adapter, on a real
// listener, a POST /orders handler that calls b.Insert and answers 201
// with a Location header and a JSON body (500 if Insert fails, or once it
// inserted while b.Fail is set), and flushes it while b.Stream is set.
//   - exactly-once: duplicates sent at once commit one row with the
//     record and get its replay; a 500 rolls its row back, and its retry
//     runs again.
//   - streamed-not-replayable: a flushed 201 commits its row as
//     executed-not-replayable; its retry gets 409 and runs nothing.
//   - commit-fails: a transaction that cannot commit (aborted by a
//     statement the handler let fail) is answered 500 transaction-failed
//     without the handler's response, and leaves no row; its retry runs
//     again.
//   - held-over-limit: a response larger than the response limit (1 MiB,
//     the adapter's default), which would be held until the commit, is
//     answered 500 transaction-response-too-large, and leaves no row;
//     its retry, smaller, commits.
func RunTxHTTP(t *testing.T, serve func(t *testing.T, b *TxBackend) string) {
	for _, c := range []struct {
		name  string
		check func(t *testing.T, url string, b *TxBackend)
	}{
		{"exactly-once", checkTxHTTP},
		{"streamed-not-replayable", checkTxHTTPStreamed},
		{"commit-fails", checkTxHTTPCommitFails},
		{"held-over-limit", checkTxHTTPHeldOverLimit},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := NewTxBackend(t)
			c.check(t, serve(t, b), b)
		})
	}
}

// checkTxHTTP drives the service of [RunTxHTTP] at url:
//   - 8 duplicates sent at once run it once, and every other gets the
//     replay; the table has one row, and a later retry replays it.
//   - A 500 leaves no row (the transaction rolled back), and its retry
//     runs again and commits one.
func checkTxHTTP(t *testing.T, url string, b *TxBackend) {
	ctx := t.Context()
	answers := Burst(8, func(int) TxAnswer { return TxPost(ctx, url, "a") })
	firsts := 0
	for i, a := range answers {
		if a.Err != nil || a.Status != http.StatusCreated || a.Body != answers[0].Body {
			t.Fatalf("duplicate %d: %+v; want 201 with the body of the first execution", i, a)
		}
		if !a.Replayed {
			firsts++
		}
	}
	if firsts != 1 || b.Runs.Load() != 1 {
		t.Fatalf("8 duplicates: %d answers not replayed, %d runs; want 1 and 1", firsts, b.Runs.Load())
	}
	if n := b.Rows(t, "a"); n != 1 {
		t.Fatalf("rows of a: %d; want 1", n)
	}
	if a := TxPost(ctx, url, "a"); a.Err != nil || a.Status != http.StatusCreated || !a.Replayed || a.Body != answers[0].Body {
		t.Fatalf("a later retry: %+v; want the replay", a)
	}

	b.Fail.Store(true)
	if a := TxPost(ctx, url, "b"); a.Err != nil || a.Status != http.StatusInternalServerError || a.Replayed {
		t.Fatalf("a failing handler: %+v; want its 500", a)
	}
	if n := b.Rows(t, "b"); n != 0 {
		t.Fatalf("rows of b after the 500: %d; want none", n)
	}
	b.Fail.Store(false)
	if a := TxPost(ctx, url, "b"); a.Err != nil || a.Status != http.StatusCreated || a.Replayed {
		t.Fatalf("the retry of the 500: %+v; want a new execution", a)
	}
	if n := b.Rows(t, "b"); n != 1 {
		t.Fatalf("rows of b after the retry: %d; want 1", n)
	}
	if b.Runs.Load() != 3 {
		t.Fatalf("%d runs; want 3 (a once, b twice)", b.Runs.Load())
	}
}

// checkTxHTTPStreamed drives the service of [RunTxHTTP] with b.Stream
// set: the flushed 201 reaches the client whole, once its row committed
// with the record as executed-not-replayable, and a retry gets 409
// response-not-replayable without running the handler; the table has one
// row.
func checkTxHTTPStreamed(t *testing.T, url string, b *TxBackend) {
	ctx := t.Context()
	b.Stream.Store(true)
	defer b.Stream.Store(false)
	first := TxPost(ctx, url, "streamed")
	if first.Err != nil || first.Status != http.StatusCreated || first.Replayed || first.Header.Get("Location") == "" || first.Body == "" {
		t.Fatalf("a streamed response: %+v; want the handler's 201 with its Location and body", first)
	}
	if a := TxPost(ctx, url, "streamed"); a.Err != nil || a.Status != http.StatusConflict || !strings.Contains(a.Body, "response-not-replayable") {
		t.Fatalf("its retry: %+v; want 409 %s", a, "response-not-replayable")
	}
	if n := b.Rows(t, "streamed"); n != 1 || b.Runs.Load() != 1 {
		t.Fatalf("rows of the streamed key: %d, runs %d; want 1 and 1", n, b.Runs.Load())
	}
}

// checkTxHTTPCommitFails drives the service of [RunTxHTTP] with b.Break
// set: the handler's transaction cannot commit, so the client gets 500
// transaction-failed and nothing of the handler's 201 (no Location,
// not its body), and no row is there; the retry, with b.Break cleared,
// runs again and commits one row.
func checkTxHTTPCommitFails(t *testing.T, url string, b *TxBackend) {
	ctx := t.Context()
	b.Break.Store(true)
	a := TxPost(ctx, url, "broken")
	b.Break.Store(false)
	if a.Err != nil || a.Status != http.StatusInternalServerError || a.Header.Get("Location") != "" ||
		a.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(a.Body, "transaction-failed") {
		t.Fatalf("a transaction that cannot commit: %+v; want a 500 %s without the handler's answer", a, "transaction-failed")
	}
	if n := b.Rows(t, "broken"); n != 0 {
		t.Fatalf("rows after the failed commit: %d; want none", n)
	}
	if a := TxPost(ctx, url, "broken"); a.Err != nil || a.Status != http.StatusCreated || a.Replayed || a.Header.Get("Location") == "" {
		t.Fatalf("the retry: %+v; want a new execution", a)
	}
	if n := b.Rows(t, "broken"); n != 1 || b.Runs.Load() != 2 {
		t.Fatalf("rows after the retry: %d, runs %d; want 1 and 2", n, b.Runs.Load())
	}
}

// checkTxHTTPHeldOverLimit drives the service of [RunTxHTTP] with b.Pad
// past the adapter's response limit (1 MiB): the response cannot be held
// until the commit, so the transaction is rolled back, the client gets
// 500 transaction-response-too-large and nothing of the handler's 201,
// and no row is there; the retry, without the padding, commits one row.
func checkTxHTTPHeldOverLimit(t *testing.T, url string, b *TxBackend) {
	ctx := t.Context()
	b.Pad.Store(2 << 20)
	a := TxPost(ctx, url, "big")
	b.Pad.Store(0)
	if a.Err != nil || a.Status != http.StatusInternalServerError || a.Header.Get("Location") != "" ||
		!strings.Contains(a.Body, "transaction-response-too-large") {
		t.Fatalf("a response over the limit: %d %v %.200q %v; want a 500 %s without the handler's answer", a.Status, a.Header, a.Body, a.Err, "transaction-response-too-large")
	}
	if n := b.Rows(t, "big"); n != 0 {
		t.Fatalf("rows after the rolled-back response: %d; want none", n)
	}
	if a := TxPost(ctx, url, "big"); a.Err != nil || a.Status != http.StatusCreated || a.Replayed {
		t.Fatalf("the retry: %+v; want a new execution", a)
	}
	if n := b.Rows(t, "big"); n != 1 || b.Runs.Load() != 2 {
		t.Fatalf("rows after the retry: %d, runs %d; want 1 and 2", n, b.Runs.Load())
	}
}
