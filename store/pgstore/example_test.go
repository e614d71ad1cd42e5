package pgstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/pgstore"
)

// A guard on PostgreSQL: claims and outcomes in one table, one pool per
// process, rows past their time swept in the background. (It needs a
// server, so it does not run as a test.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := pgstore.SetupSchema(ctx, pool); err != nil {
		log.Fatal(err)
	}
	s, err := pgstore.New(pool, pgstore.WithMaxResponseBytes(1<<20))
	if err != nil {
		log.Fatal(err)
	}
	defer s.StartSweeper(ctx, 0)() // every minute

	guard, err := middleware.New(s)
	if err != nil {
		log.Fatal(err)
	}
	total, replayed, err := middleware.Do(ctx, guard, "charge:order-42", map[string]int{"cents": 1999},
		func(ctx context.Context) (int, error) {
			return 1999, nil // charge the card once
		})
	fmt.Println(total, replayed, err)
}

// An operator looks at one record and forgets it, so that a retry runs the
// work again. Keys are stored as they are when they are printable ASCII:
//
//	SELECT state, fence, expires_at FROM idemkit_records WHERE key = 'idempotency:charge:order-42';
func ExampleStore_Delete() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://ops@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	s, err := pgstore.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	rec, ok, err := s.Get(ctx, "idempotency:charge:order-42")
	if err != nil {
		log.Fatal(err)
	}
	if ok {
		fmt.Println(rec.State, rec.Fence, rec.ExpiresAt)
		if _, err := s.Delete(ctx, rec.Key); err != nil {
			log.Fatal(err)
		}
	}
}

// Waiting duplicates are woken by LISTEN/NOTIFY on a connection of the
// store's own. A pool gives it one by default; a store on another client
// (here one *pgx.Conn, used by one goroutine at a time) listens on a
// connection that WithListenConn opens. Behind a proxy that pools
// connections per transaction, WithListenConn(nil) turns listening off
// and duplicates poll.
func ExampleWithListenConn() {
	ctx := context.Background()
	const url = "postgres://app@db.internal:5432/app"
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	s, err := pgstore.New(conn, pgstore.WithListenConn(func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.Connect(ctx, url)
	}))
	if err != nil {
		log.Fatal(err)
	}
	guard, err := middleware.New(s)
	if err != nil {
		log.Fatal(err)
	}
	_ = guard
}
