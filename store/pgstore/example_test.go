package pgstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/lock/pglock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/pgstore"
)

// A guard on PostgreSQL: records in pgstore, locks in pglock, one pool per
// process, expired rows swept in the background. (It needs a server, so it
// does not run as a test.)
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
	if err := pglock.SetupSchema(ctx, pool); err != nil {
		log.Fatal(err)
	}
	records, err := pgstore.New(pool, pgstore.WithMaxResponseBytes(1<<20))
	if err != nil {
		log.Fatal(err)
	}
	locker, err := pglock.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	defer records.StartSweeper(ctx, 10*time.Minute)()
	defer locker.StartSweeper(ctx, time.Minute)()

	guard, err := middleware.New(records, locker)
	if err != nil {
		log.Fatal(err)
	}
	total, replayed, err := middleware.Do(ctx, guard, "charge:order-42", map[string]int{"cents": 1999},
		func(ctx context.Context) (int, error) {
			return 1999, nil // charge the card once
		})
	fmt.Println(total, replayed, err)
}
