// Command orders is a small order service whose orders are written exactly
// once: each POST /orders writes its order in the transaction of its
// guarded work (pgstore.Tx), which the guard commits together with the
// idempotency record. The order and its record land together or not at
// all, so a retry either replays the order or, when nothing landed, runs
// again; it never creates a second order, even if the process dies between
// the order's INSERT and its answer.
//
// It needs PostgreSQL: only the postgres store has transactions that
// guarded work can share.
//
//	go run ./orders -postgres-url 'postgres://user@127.0.0.1:5432/shop?sslmode=disable'
//
//	POST /orders       guarded, Idempotency-Key required; body
//	                   {"item": "book", "quantity": 2}: 201 Created with
//	                   Location /orders/<id> and the order
//	POST /checkouts    guarded, Idempotency-Key required; body
//	                   {"item": "book", "quantity": 2, "card": "tok_visa"}:
//	                   the order placed, charged and confirmed in three
//	                   steps with recovery points (see checkout)
//	GET  /orders/{id}  the order, or 404
//
// At start it creates, if missing, the idempotency records (as the other
// demos with -store postgres) and two tables in the same database: orders
// and stock, which it stocks with a small catalogue (book, pen: 1000 each;
// umbrella: none) unless the items are there already.
//
// The handler writes the order, then takes its quantity from the stock,
// both in the work's transaction:
//
//   - an item not in the catalogue is answered 422, before anything is
//     written; like any 4xx it is recorded, and a retry replays it;
//   - an item whose stock is short is declined: 409, not recorded
//     (middleware.DoNotRecord), so the order's row is rolled back with the
//     stock, and a retry with the same key runs again (once the item is
//     back in stock, it creates the order);
//   - a failure of the database is answered 500, which is not recorded
//     either: rolled back, and run again by a retry.
//
// POST /checkouts is the same order in steps (middleware.StepOf): its
// order and its confirmation are transactional steps, each committing its
// rows with its recovery point, and its charge goes to a payment provider
// between them. A retry after a failure or a crash part-way resumes after
// the last finished step, so it never orders or charges twice:
//
//	curl -i -H 'Idempotency-Key: co-1' -H 'X-Fail: after-charge' -d '{"item":"pen","quantity":1,"card":"tok_visa"}' http://127.0.0.1:8080/checkouts  # 500 after the charge
//	curl -i -H 'Idempotency-Key: co-1' -d '{"item":"pen","quantity":1,"card":"tok_visa"}' http://127.0.0.1:8080/checkouts  # resumes: confirmed, charged once
//
// The 201 is held by the middleware until the transaction has committed;
// if the commit fails, the client gets a problem instead (503 when the
// database cannot be reached, 500 when the transaction itself failed, 409
// when it lost a serialization conflict), and the order is not there.
//
//	curl -i -H 'Idempotency-Key: order-1' -d '{"item":"book","quantity":2}' http://127.0.0.1:8080/orders
//	curl -i -H 'Idempotency-Key: order-1' -d '{"item":"book","quantity":2}' http://127.0.0.1:8080/orders  # replayed
//	curl -i http://127.0.0.1:8080/orders/1
//
// It logs with slog and shuts down gracefully on SIGINT and SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/examples/internal/demo"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/pgstore"
)

// maxQuantity bounds the quantity of one order.
const maxQuantity = 100

// shutdownTimeout bounds a graceful shutdown, as in the other demos: the
// requests still running after it are cut.
const shutdownTimeout = 10 * time.Second

// schema creates the service's tables, if missing, and stocks the
// catalogue's items that are not there yet. It runs as one transaction
// (one simple-protocol query), under an advisory lock, so instances that
// start together do not race to create the tables.
const schema = `
SELECT pg_advisory_xact_lock(hashtext('idemkit orders demo: schema'));
CREATE TABLE IF NOT EXISTS stock (
	item      text PRIMARY KEY,
	available integer NOT NULL CHECK (available >= 0)
);
CREATE TABLE IF NOT EXISTS orders (
	id         bigserial PRIMARY KEY,
	item       text NOT NULL,
	quantity   integer NOT NULL CHECK (quantity > 0),
	created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO stock (item, available) VALUES ('book', 1000), ('pen', 1000), ('umbrella', 0)
	ON CONFLICT (item) DO NOTHING;
ALTER TABLE orders ADD COLUMN IF NOT EXISTS status text NOT NULL DEFAULT 'placed';
ALTER TABLE orders ADD COLUMN IF NOT EXISTS payment bigint;
CREATE TABLE IF NOT EXISTS payments (
	id              bigserial PRIMARY KEY,
	idempotency_key text NOT NULL UNIQUE,
	card            text NOT NULL,
	amount_cents    bigint NOT NULL,
	created_at      timestamptz NOT NULL DEFAULT now()
);
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	err := run(ctx, os.Args[1:], logger, nil)
	stop()
	if err != nil {
		logger.Error("orders demo", slog.String("error", err.Error()))
		os.Exit(1)
	}
}

// run parses args (-addr, -store, -postgres-url), connects to PostgreSQL,
// creates the tables, builds the guard and serves until ctx ends; then it
// shuts the server down gracefully (within shutdownTimeout) and closes
// the pool. If ready is not nil, it receives the address the server
// listens on. A -store other than postgres, or no -postgres-url, is an
// error that says so.
func run(ctx context.Context, args []string, logger *slog.Logger, ready chan<- string) error {
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	storeName := fs.String("store", "postgres", "the guard's backend: postgres only (the orders commit in the records' transactions)")
	url := fs.String("postgres-url", "", "PostgreSQL connection URL (the records and the orders are created in that database if missing)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *storeName != "postgres" {
		return fmt.Errorf("the orders demo needs PostgreSQL: its orders commit in the same transaction as their idempotency records (pgstore.Tx), which only -store postgres has, not -store %s", *storeName)
	}
	if *url == "" {
		return errors.New("the orders demo needs PostgreSQL: give its connection URL with -postgres-url")
	}

	pool, err := pgxpool.New(ctx, *url)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	if err := pgstore.SetupSchema(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, schema); err != nil {
		return fmt.Errorf("postgres: creating the orders tables: %w", err)
	}
	s, err := pgstore.New(pool, pgstore.WithLogger(logger))
	if err != nil {
		return err
	}
	stopSweeper := s.StartSweeper(ctx, 0)
	defer stopSweeper()
	guard, err := middleware.New(s, middleware.WithLogger(logger))
	if err != nil {
		return err
	}
	// Refuse to start on a backend that cannot serve (its error names the
	// fix) rather than answer every request with an error.
	if err := guard.Check(ctx); err != nil {
		return err
	}
	h, err := routes(guard, pool, logger)
	if err != nil {
		return err
	}
	srv := demo.HTTPServer(h)

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	logger.Info("serving the orders demo", slog.String("addr", ln.Addr().String()))
	if ready != nil {
		ready <- ln.Addr().String()
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	logger.Info("stopped")
	return nil
}

// routes mounts the service: POST /orders and POST /checkouts behind the
// idempotency middleware (a key required), GET /orders/{id} unguarded.
func routes(guard *middleware.Guard, pool *pgxpool.Pool, logger *slog.Logger) (http.Handler, error) {
	idem, err := nethttp.New(guard, nethttp.WithKeyRequired(true), nethttp.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	svc := &service{pool: pool, logger: logger}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", idem(http.HandlerFunc(svc.create)))
	mux.Handle("POST /checkouts", idem(http.HandlerFunc(svc.checkout)))
	mux.HandleFunc("GET /orders/{id}", svc.get)
	return mux, nil
}

// service is the order service's handlers.
type service struct {
	pool   *pgxpool.Pool // for reads; the orders are written in the guarded work's transaction
	logger *slog.Logger
}

// orderRequest is the body of POST /orders.
type orderRequest struct {
	Item     string `json:"item"`
	Quantity int    `json:"quantity"`
}

// order is an order as the service answers it.
type order struct {
	ID        int64     `json:"id"`
	Item      string    `json:"item"`
	Quantity  int       `json:"quantity"`
	CreatedAt time.Time `json:"created_at"`
}

// create answers POST /orders. Everything it writes is in pgstore.Tx's
// transaction, which the guard commits with the record of the answer, or
// rolls back when the answer is not recorded (a 5xx, or DoNotRecord).
func (s *service) create(w http.ResponseWriter, r *http.Request) {
	var req orderRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Item == "" || req.Quantity < 1 || req.Quantity > maxQuantity {
		writeError(w, http.StatusBadRequest, fmt.Sprintf(`the body must be {"item": "<an item>", "quantity": <1 to %d>}`, maxQuantity))
		return
	}
	ctx := r.Context()
	tx, err := pgstore.Tx(ctx)
	if err != nil {
		s.failed(w, r, err)
		return
	}
	var available int
	err = tx.QueryRow(ctx, `SELECT available FROM stock WHERE item = $1`, req.Item).Scan(&available)
	if errors.Is(err, pgx.ErrNoRows) {
		// Nothing written: the 422 is recorded with an empty transaction.
		writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("%q is not in the catalogue", req.Item))
		return
	}
	if err != nil {
		s.failed(w, r, err)
		return
	}
	o := order{Item: req.Item, Quantity: req.Quantity}
	err = tx.QueryRow(ctx, `INSERT INTO orders (item, quantity) VALUES ($1, $2) RETURNING id, created_at`,
		req.Item, req.Quantity).Scan(&o.ID, &o.CreatedAt)
	if err != nil {
		s.failed(w, r, err)
		return
	}
	// The stock is taken by a conditional UPDATE, so two orders racing
	// for the last items cannot both have them.
	tag, err := tx.Exec(ctx, `UPDATE stock SET available = available - $2 WHERE item = $1 AND available >= $2`,
		req.Item, req.Quantity)
	if err != nil {
		s.failed(w, r, err)
		return
	}
	if tag.RowsAffected() == 0 {
		// Declined: not recorded, so the order's row is rolled back and
		// a retry with this key runs again.
		middleware.DoNotRecord(ctx)
		writeError(w, http.StatusConflict, fmt.Sprintf("%q is out of stock: %d ordered, fewer available; retry later with the same key", req.Item, req.Quantity))
		return
	}
	w.Header().Set("Location", "/orders/"+strconv.FormatInt(o.ID, 10))
	writeJSON(w, http.StatusCreated, o)
}

// checkoutRequest is the body of POST /checkouts.
type checkoutRequest struct {
	Item     string `json:"item"`
	Quantity int    `json:"quantity"`
	Card     string `json:"card"`
}

// checkoutAnswer is what POST /checkouts answers.
type checkoutAnswer struct {
	Order   int64  `json:"order"`
	Payment int64  `json:"payment"`
	Status  string `json:"status"`
}

// unitCents is the price of every item, in cents.
const unitCents = 1250

// errOutOfStock and errNotInCatalogue are the order step's refusals.
var (
	errOutOfStock     = errors.New("out of stock")
	errNotInCatalogue = errors.New("not in the catalogue")
)

// checkout answers POST /checkouts: an order placed and paid in three
// steps, each a recovery point (middleware.StepOf), so that a retry after
// a crash or a failure part-way resumes after the last step that finished
// instead of ordering or charging again:
//
//  1. "order", a transactional step: the order's row and the stock it
//     takes are written in the step's own transaction (pgstore.Tx inside
//     the step), which commits with the step's recovery point;
//  2. "charge", a call to the payment provider, outside the database's
//     transactions: the step is recorded once the provider answered, and
//     the provider is given an idempotency key of its own (the request's
//     scope and key, and the step), so that a crash between its answer and
//     the recording cannot charge twice either;
//  3. "confirm", a transactional step: the order is marked paid.
//
// The provider here is the payments table, written outside the work's
// transactions as a remote service would be. With the header X-Fail:
// after-charge (a fault switch of this demo, not part of the request's
// fingerprint), the handler fails with 500 once the charge is recorded:
// the answer is not recorded and the claim is released, and the retry
// resumes at "confirm".
func (s *service) checkout(w http.ResponseWriter, r *http.Request) {
	var req checkoutRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Item == "" || req.Quantity < 1 || req.Quantity > maxQuantity || req.Card == "" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf(`the body must be {"item": "<an item>", "quantity": <1 to %d>, "card": "<a card token>"}`, maxQuantity))
		return
	}
	ctx := r.Context()
	orderID, err := middleware.StepOf(ctx, "order", func(ctx context.Context) (int64, error) {
		tx, err := pgstore.Tx(ctx)
		if err != nil {
			return 0, err
		}
		tag, err := tx.Exec(ctx, `UPDATE stock SET available = available - $2 WHERE item = $1 AND available >= $2`, req.Item, req.Quantity)
		if err != nil {
			return 0, err
		}
		if tag.RowsAffected() == 0 {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM stock WHERE item = $1`, req.Item).Scan(&n); err != nil {
				return 0, err
			}
			if n == 0 {
				return 0, errNotInCatalogue
			}
			return 0, errOutOfStock
		}
		var id int64
		err = tx.QueryRow(ctx, `INSERT INTO orders (item, quantity, status) VALUES ($1, $2, 'placed') RETURNING id`, req.Item, req.Quantity).Scan(&id)
		return id, err
	})
	switch {
	case errors.Is(err, errNotInCatalogue):
		writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("%q is not in the catalogue", req.Item))
		return
	case errors.Is(err, errOutOfStock):
		middleware.DoNotRecord(ctx)
		writeError(w, http.StatusConflict, fmt.Sprintf("%q is out of stock; retry later with the same key", req.Item))
		return
	case err != nil:
		s.failed(w, r, err)
		return
	}
	info, _ := middleware.CallInfoFrom(ctx)
	paymentID, err := middleware.StepOf(ctx, "charge", func(ctx context.Context) (int64, error) {
		return s.charge(ctx, fmt.Sprintf("%q %q charge", info.Scope, info.Key), req.Card, int64(req.Quantity)*unitCents)
	})
	if err != nil {
		s.failed(w, r, err)
		return
	}
	if r.Header.Get("X-Fail") == "after-charge" {
		s.failed(w, r, errors.New("failing after the charge, as asked (X-Fail)"))
		return
	}
	if _, err := middleware.StepOf(ctx, "confirm", func(ctx context.Context) (bool, error) {
		tx, err := pgstore.Tx(ctx)
		if err != nil {
			return false, err
		}
		_, err = tx.Exec(ctx, `UPDATE orders SET status = 'paid', payment = $2 WHERE id = $1`, orderID, paymentID)
		return true, err
	}); err != nil {
		s.failed(w, r, err)
		return
	}
	w.Header().Set("Location", "/orders/"+strconv.FormatInt(orderID, 10))
	writeJSON(w, http.StatusCreated, checkoutAnswer{Order: orderID, Payment: paymentID, Status: "paid"})
}

// charge is the payment provider's API: it charges card amount cents once
// per idempotency key and returns the payment's id (the first one's, for
// a key it has seen).
func (s *service) charge(ctx context.Context, key, card string, cents int64) (int64, error) {
	var id int64
	err := s.pool.QueryRow(ctx, `WITH p AS (
	INSERT INTO payments (idempotency_key, card, amount_cents) VALUES ($1, $2, $3)
	ON CONFLICT (idempotency_key) DO NOTHING RETURNING id)
SELECT id FROM p UNION ALL SELECT id FROM payments WHERE idempotency_key = $1 LIMIT 1`, key, card, cents).Scan(&id)
	return id, err
}

// get answers GET /orders/{id}.
func (s *service) get(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		writeError(w, http.StatusNotFound, "no such order")
		return
	}
	o := order{ID: id}
	err = s.pool.QueryRow(r.Context(), `SELECT item, quantity, created_at FROM orders WHERE id = $1`, id).
		Scan(&o.Item, &o.Quantity, &o.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		writeError(w, http.StatusNotFound, "no such order")
		return
	}
	if err != nil {
		s.failed(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// failed answers 500 for a failure of the database. Under the guard, a 5xx
// is not recorded: the work's writes are rolled back and a retry runs
// again.
func (s *service) failed(w http.ResponseWriter, r *http.Request, err error) {
	s.logger.ErrorContext(r.Context(), "orders demo: the database failed", slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	writeError(w, http.StatusInternalServerError, "the order could not be processed; retry with the same key")
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers {"error": msg} with status.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
