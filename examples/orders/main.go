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

// routes mounts the service: POST /orders behind the idempotency
// middleware (a key required), GET /orders/{id} unguarded.
func routes(guard *middleware.Guard, pool *pgxpool.Pool, logger *slog.Logger) (http.Handler, error) {
	idem, err := nethttp.New(guard, nethttp.WithKeyRequired(true), nethttp.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	svc := &service{pool: pool, logger: logger}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", idem(http.HandlerFunc(svc.create)))
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
