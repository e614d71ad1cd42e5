package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/examples/internal/demotest"
	"github.com/idemkit/idemkit/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// shop is one database of the shared PostgreSQL server, for one test: the
// instances of the service the test starts on it, and a pool of its own to
// look at the tables.
type shop struct {
	url   string
	admin *pgxpool.Pool
}

// newShop creates a database of its own for the test, dropped when the
// test ends.
func newShop(t *testing.T) shop {
	t.Helper()
	srv := testenv.Postgres(t)
	name := testenv.Name(t)
	conn, err := pgx.Connect(t.Context(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `CREATE DATABASE `+name); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	admin, err := pgxpool.New(t.Context(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, srv.URL); err == nil {
			_, _ = conn.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`)
			_ = conn.Close(ctx)
		}
	})
	return shop{url: u.String(), admin: admin}
}

// start runs n instances of the service at once on the shop's database,
// each with its own pool, on free loopback ports, and returns their
// addresses once they all listen. They are stopped when the test ends,
// which fails unless each shuts down gracefully within 15 seconds.
func (s shop) start(t *testing.T, n int) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, n)
	done := make(chan error, n)
	for range n {
		go func() {
			done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-postgres-url", s.url}, slog.New(slog.DiscardHandler), ready)
		}()
	}
	stopped := 0
	t.Cleanup(func() {
		cancel()
		for ; stopped < n; stopped++ {
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("graceful shutdown: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("%d instances did not shut down", n-stopped)
				return
			}
		}
	})
	addrs := make([]string, 0, n)
	for len(addrs) < n {
		select {
		case addr := <-ready:
			addrs = append(addrs, addr)
		case err := <-done:
			stopped++
			t.Fatalf("run: %v", err)
		}
	}
	return addrs
}

// orders returns the rows of the orders table of item, oldest first.
func (s shop) orders(t *testing.T, item string) []order {
	t.Helper()
	rows, err := s.admin.Query(t.Context(), `SELECT id, item, quantity, created_at FROM orders WHERE item = $1 ORDER BY id`, item)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (order, error) {
		var o order
		err := row.Scan(&o.ID, &o.Item, &o.Quantity, &o.CreatedAt)
		return o, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// stock returns how many of item are available.
func (s shop) stock(t *testing.T, item string) int {
	t.Helper()
	var n int
	if err := s.admin.QueryRow(t.Context(), `SELECT available FROM stock WHERE item = $1`, item).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// answer is what one request got.
type answer struct {
	status int
	header http.Header
	body   string
	err    error
}

func (a answer) replayed() bool { return a.header.Get("Idempotent-Replayed") == "true" }

func (a answer) String() string {
	if a.err != nil {
		return a.err.Error()
	}
	return fmt.Sprintf("%d replayed=%v %s", a.status, a.replayed(), strings.TrimSpace(a.body))
}

// client sends each request on a connection of its own, so that the
// duplicates of a storm are separate clients.
var client = &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}

// post sends POST /orders with key and body to addr.
func post(ctx context.Context, addr, key, body string) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/orders", strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("Content-Type", "application/json")
	return do(req)
}

// get sends GET path to addr.
func get(ctx context.Context, addr, path string) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return answer{err: err}
	}
	return do(req)
}

func do(req *http.Request) answer {
	resp, err := client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
}

// decode decodes the order of a 200 or 201 answer.
func decode(t *testing.T, a answer) order {
	t.Helper()
	var o order
	if err := json.Unmarshal([]byte(a.body), &o); err != nil {
		t.Fatalf("%v: %v", a, err)
	}
	return o
}

// TestRetryStormCreatesOneOrder starts two instances of the service at
// once on one database, each with its own pool, and fires 32 duplicates of
// one order at them at once: exactly one answer is the first execution,
// every other is its replay (or, if it outwaits the guard's wait budget,
// 409 in progress); the table holds one order, the stock is taken once,
// and both instances serve the order at its Location.
func TestRetryStormCreatesOneOrder(t *testing.T) {
	s := newShop(t)
	addrs := s.start(t, 2)
	before := s.stock(t, "book")
	const body = `{"item":"book","quantity":2}`
	answers := demotest.Burst(32, func(i int) answer {
		return post(t.Context(), addrs[i%len(addrs)], "storm-1", body)
	})
	var first *answer
	for i := range answers {
		if a := &answers[i]; a.err == nil && a.status == http.StatusCreated && !a.replayed() {
			if first != nil {
				t.Fatalf("two first executions: %v and %v", first, a)
			}
			first = a
		}
	}
	if first == nil {
		t.Fatalf("no first execution among %v", answers)
	}
	replays := 0
	for i, a := range answers {
		switch {
		case &answers[i] == first:
		case a.err == nil && a.status == http.StatusCreated:
			if !a.replayed() || a.body != first.body || a.header.Get("Location") != first.header.Get("Location") {
				t.Errorf("duplicate %d: %v %v; want a replay of %v", i, a, a.header, first)
			}
			replays++
		case a.err == nil && a.status == http.StatusConflict && a.header.Get("Retry-After") != "":
			// In progress past the wait budget: the client retries later.
		default:
			t.Errorf("duplicate %d: %v; want the first execution, its replay or 409 in progress", i, a)
		}
	}
	t.Logf("32 duplicates over 2 instances: 1 first execution, %d replays", replays)

	rows := s.orders(t, "book")
	created := decode(t, *first)
	if len(rows) != 1 || rows[0].ID != created.ID || rows[0].Quantity != 2 {
		t.Fatalf("the orders of book: %+v; want the one answered, %+v", rows, created)
	}
	if got := s.stock(t, "book"); got != before-2 {
		t.Fatalf("book stock %d after the storm; want %d (taken once)", got, before-2)
	}
	for _, addr := range addrs {
		a := get(t.Context(), addr, first.header.Get("Location"))
		if a.err != nil || a.status != http.StatusOK || decode(t, a).ID != created.ID {
			t.Fatalf("GET %s at %s: %v", first.header.Get("Location"), addr, a)
		}
	}
}

// TestRetryReplaysTheOrder: a retry of a created order replays it byte for
// byte and creates nothing; the key with another body is refused (422); a
// request without a key is refused (400); an item not in the catalogue is
// answered 422 and recorded, so its retry replays it; an unknown order is
// 404.
func TestRetryReplaysTheOrder(t *testing.T) {
	s := newShop(t)
	addr := s.start(t, 1)[0]
	ctx := t.Context()
	const body = `{"item":"pen","quantity":3}`
	first := post(ctx, addr, "pen-1", body)
	if first.err != nil || first.status != http.StatusCreated || first.replayed() {
		t.Fatalf("first: %v", first)
	}
	retry := post(ctx, addr, "pen-1", body)
	if retry.err != nil || retry.status != http.StatusCreated || !retry.replayed() ||
		retry.body != first.body || retry.header.Get("Location") != first.header.Get("Location") {
		t.Fatalf("retry: %v %v; want a replay of %v %v", retry, retry.header, first, first.header)
	}
	if a := post(ctx, addr, "pen-1", `{"item":"pen","quantity":4}`); a.err != nil || a.status != http.StatusUnprocessableEntity {
		t.Fatalf("the key with another body: %v; want 422", a)
	}
	if a := post(ctx, addr, "", body); a.err != nil || a.status != http.StatusBadRequest {
		t.Fatalf("no key: %v; want 400", a)
	}
	if rows := s.orders(t, "pen"); len(rows) != 1 {
		t.Fatalf("the orders of pen: %+v; want one", rows)
	}
	if a := get(ctx, addr, first.header.Get("Location")); a.err != nil || a.status != http.StatusOK || a.body != first.body {
		t.Fatalf("GET %s: %v; want %s", first.header.Get("Location"), a, first.body)
	}

	const kite = `{"item":"kite","quantity":1}`
	unknown := post(ctx, addr, "kite-1", kite)
	if unknown.err != nil || unknown.status != http.StatusUnprocessableEntity || unknown.replayed() {
		t.Fatalf("an item not in the catalogue: %v; want 422", unknown)
	}
	if a := post(ctx, addr, "kite-1", kite); a.err != nil || a.status != http.StatusUnprocessableEntity || !a.replayed() || a.body != unknown.body {
		t.Fatalf("its retry: %v; want the 422 replayed", a)
	}
	if a := get(ctx, addr, "/orders/999"); a.err != nil || a.status != http.StatusNotFound {
		t.Fatalf("GET /orders/999: %v; want 404", a)
	}
}

// TestDeclinedOrderLeavesNoOrder: an order of an item out of stock is
// declined (409). Its handler wrote the order's row before it found the
// stock short; the row was rolled back with the transaction, so the table
// has none. The retry with the same key is not a replay: it runs again,
// and is declined again; once the item is restocked, the next retry
// creates the order, once, and the one after replays it. The order's id
// shows that the two declined runs did insert their rows (each took an id
// of the sequence, which does not roll back).
func TestDeclinedOrderLeavesNoOrder(t *testing.T) {
	s := newShop(t)
	addr := s.start(t, 1)[0]
	ctx := t.Context()
	const body = `{"item":"umbrella","quantity":1}`
	for i := range 2 {
		a := post(ctx, addr, "umbrella-1", body)
		if a.err != nil || a.status != http.StatusConflict || a.replayed() || !strings.Contains(a.body, "out of stock") {
			t.Fatalf("attempt %d: %v; want 409 out of stock, not replayed", i+1, a)
		}
		if rows := s.orders(t, "umbrella"); len(rows) != 0 {
			t.Fatalf("the orders of umbrella after attempt %d: %+v; want none", i+1, rows)
		}
	}
	if _, err := s.admin.Exec(ctx, `UPDATE stock SET available = 5 WHERE item = 'umbrella'`); err != nil {
		t.Fatal(err)
	}
	created := post(ctx, addr, "umbrella-1", body)
	if created.err != nil || created.status != http.StatusCreated || created.replayed() {
		t.Fatalf("the retry after the restock: %v; want the order created", created)
	}
	if a := post(ctx, addr, "umbrella-1", body); a.err != nil || a.status != http.StatusCreated || !a.replayed() || a.body != created.body {
		t.Fatalf("the next retry: %v; want the order replayed", a)
	}
	rows := s.orders(t, "umbrella")
	if len(rows) != 1 || rows[0].ID != decode(t, created).ID {
		t.Fatalf("the orders of umbrella: %+v; want the one created", rows)
	}
	if rows[0].ID != 3 {
		t.Errorf("the order's id is %d; want 3, after the two declined runs' rolled-back rows", rows[0].ID)
	}
	if got := s.stock(t, "umbrella"); got != 4 {
		t.Fatalf("umbrella stock %d; want 4", got)
	}
}

// TestNeedsPostgreSQL: any other -store, or no -postgres-url, is refused
// at start with an error that says the service needs PostgreSQL.
func TestNeedsPostgreSQL(t *testing.T) {
	for _, args := range [][]string{
		{"-addr", "127.0.0.1:0", "-store", "memory"},
		{"-addr", "127.0.0.1:0", "-store", "redis"},
		{"-addr", "127.0.0.1:0"},
	} {
		ready := make(chan string, 1)
		err := run(t.Context(), args, slog.New(slog.DiscardHandler), ready)
		if err == nil || !strings.Contains(err.Error(), "needs PostgreSQL") {
			t.Errorf("run %v: %v; want an error saying it needs PostgreSQL", args, err)
		}
		if len(ready) != 0 {
			t.Errorf("run %v listened", args)
		}
	}
}

// postCheckout sends POST /checkouts with key and body to addr, with the
// fault switch X-Fail when fail is not empty.
func postCheckout(ctx context.Context, addr, key, body, fail string) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/checkouts", strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	if fail != "" {
		req.Header.Set("X-Fail", fail)
	}
	return do(req)
}

// TestCheckoutResumesAfterTheCharge: a checkout that fails after its
// charge step (500, not recorded) is retried on another instance, which
// resumes at its last step: one order, the stock taken once, one payment,
// and the order paid with it; later retries replay the answer.
func TestCheckoutResumesAfterTheCharge(t *testing.T) {
	s := newShop(t)
	addrs := s.start(t, 2)
	body := `{"item":"pen","quantity":3,"card":"tok_visa"}`
	before := s.stock(t, "pen")
	if a := postCheckout(t.Context(), addrs[0], "checkout-1", body, "after-charge"); a.err != nil || a.status != http.StatusInternalServerError {
		t.Fatalf("the failing checkout: %v; want 500", a)
	}
	first := postCheckout(t.Context(), addrs[1], "checkout-1", body, "")
	if first.err != nil || first.status != http.StatusCreated || first.replayed() {
		t.Fatalf("the retry: %v; want 201, the first execution of its answer", first)
	}
	var got checkoutAnswer
	if err := json.Unmarshal([]byte(first.body), &got); err != nil || got.Status != "paid" || got.Order == 0 || got.Payment == 0 {
		t.Fatalf("the retry's answer %q: %v", first.body, err)
	}
	orders := s.orders(t, "pen")
	if len(orders) != 1 || orders[0].ID != got.Order || s.stock(t, "pen") != before-3 {
		t.Fatalf("orders %+v, stock %d → %d; want one order, the stock taken once", orders, before, s.stock(t, "pen"))
	}
	var payments int
	var status string
	var paidWith int64
	if err := s.admin.QueryRow(t.Context(), `SELECT count(*) FROM payments`).Scan(&payments); err != nil || payments != 1 {
		t.Fatalf("%d payments (%v); want one charge", payments, err)
	}
	if err := s.admin.QueryRow(t.Context(), `SELECT status, payment FROM orders WHERE id = $1`, got.Order).Scan(&status, &paidWith); err != nil || status != "paid" || paidWith != got.Payment {
		t.Fatalf("order %d: %q, paid with %d (%v); want paid with payment %d", got.Order, status, paidWith, err, got.Payment)
	}
	for _, addr := range addrs {
		if a := postCheckout(t.Context(), addr, "checkout-1", body, "after-charge"); a.status != http.StatusCreated || !a.replayed() || a.body != first.body {
			t.Fatalf("a later retry at %s: %v; want the replay of %s", addr, a, first.body)
		}
	}
}
