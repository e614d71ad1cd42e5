package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/idemkit/idemkit/echoadapter"
	"github.com/idemkit/idemkit/examples/internal/demotest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/pgstore"
)

// txBackend is a guard on a pgstore.Store whose record table is the
// test's own, on the shared PostgreSQL server, with an orders table beside
// it that handlers write in the guarded work's transaction (pgstore.Tx).
type txBackend struct {
	guard  *middleware.Guard
	pool   *pgxpool.Pool
	orders string // one row per order, with the key it was made under; no unique constraint, so a second execution shows
}

func newTxBackend(t *testing.T) txBackend {
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
	// A wait budget no duplicate outwaits on a slow machine: every
	// duplicate gets the replay.
	g, err := middleware.New(s, middleware.WithLogger(slog.New(slog.DiscardHandler)), middleware.WithWaitBudget(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return txBackend{guard: g, pool: pool, orders: orders}
}

// insert writes an order row for the guarded call of ctx, in its
// transaction.
func (b txBackend) insert(ctx context.Context) error {
	tx, err := pgstore.Tx(ctx)
	if err != nil {
		return err
	}
	info, _ := middleware.CallInfoFrom(ctx)
	_, err = tx.Exec(ctx, `INSERT INTO `+b.orders+` (key) VALUES ($1)`, info.Key)
	return err
}

// rows counts the order rows of key.
func (b txBackend) rows(t *testing.T, key string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+b.orders+` WHERE key = $1`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// txAnswer is what one POST got.
type txAnswer struct {
	status   int
	replayed bool
	body     string
	err      error
}

// txPost posts an order with key to url on a connection of its own.
func txPost(ctx context.Context, url, key string) txAnswer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/orders", strings.NewReader(`{"item":"book"}`))
	if err != nil {
		return txAnswer{err: err}
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return txAnswer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return txAnswer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", body: string(b), err: err}
}

// checkTxHTTP drives the service at url, whose POST /orders handler
// inserts an order row in pgstore.Tx (counting its runs) and answers 201,
// or 500 once it inserted while fail is set: 8 duplicates sent at once run
// it once, and every other gets the replay; the table has one row, and a
// later retry replays it. A 500 leaves no row (the transaction rolled
// back), and its retry runs again and commits one.
func checkTxHTTP(t *testing.T, url string, b txBackend, fail *atomic.Bool, runs *atomic.Int64) {
	ctx := t.Context()
	answers := demotest.Burst(8, func(int) txAnswer { return txPost(ctx, url, "a") })
	firsts := 0
	for i, a := range answers {
		if a.err != nil || a.status != http.StatusCreated || a.body != answers[0].body {
			t.Fatalf("duplicate %d: %+v; want 201 with the body of the first execution", i, a)
		}
		if !a.replayed {
			firsts++
		}
	}
	if firsts != 1 || runs.Load() != 1 {
		t.Fatalf("8 duplicates: %d answers not replayed, %d runs; want 1 and 1", firsts, runs.Load())
	}
	if n := b.rows(t, "a"); n != 1 {
		t.Fatalf("rows of a: %d; want 1", n)
	}
	if a := txPost(ctx, url, "a"); a.err != nil || a.status != http.StatusCreated || !a.replayed || a.body != answers[0].body {
		t.Fatalf("a later retry: %+v; want the replay", a)
	}

	fail.Store(true)
	if a := txPost(ctx, url, "b"); a.err != nil || a.status != http.StatusInternalServerError || a.replayed {
		t.Fatalf("a failing handler: %+v; want its 500", a)
	}
	if n := b.rows(t, "b"); n != 0 {
		t.Fatalf("rows of b after the 500: %d; want none", n)
	}
	fail.Store(false)
	if a := txPost(ctx, url, "b"); a.err != nil || a.status != http.StatusCreated || a.replayed {
		t.Fatalf("the retry of the 500: %+v; want a new execution", a)
	}
	if n := b.rows(t, "b"); n != 1 {
		t.Fatalf("rows of b after the retry: %d; want 1", n)
	}
	if runs.Load() != 3 {
		t.Fatalf("%d runs; want 3 (a once, b twice)", runs.Load())
	}
}

// TestTxEcho: echo handlers behind echoadapter that write in pgstore.Tx
// (from c.Request().Context(), the guarded work's context) commit their
// rows with the record exactly once, and an error, which echo's error
// handler answers 500, rolls them back.
func TestTxEcho(t *testing.T) {
	b := newTxBackend(t)
	idem, err := echoadapter.New(b.guard, echoadapter.WithHTTPOptions(nethttp.WithKeyRequired(true)))
	if err != nil {
		t.Fatal(err)
	}
	var (
		fail atomic.Bool
		runs atomic.Int64
	)
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST("/orders", func(c echo.Context) error {
		runs.Add(1)
		ctx := c.Request().Context()
		if err := b.insert(ctx); err != nil {
			return err
		}
		if fail.Load() {
			return errors.New("declined")
		}
		info, _ := middleware.CallInfoFrom(ctx)
		return c.JSON(http.StatusCreated, map[string]string{"key": info.Key, "fence": info.Fence.String()})
	}, idem)
	ts := httptest.NewServer(e)
	defer ts.Close()
	checkTxHTTP(t, ts.URL, b, &fail, &runs)
}
