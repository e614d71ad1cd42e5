package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	_ "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/mysqlstore"
)

// A guard on MySQL or MariaDB: claims and outcomes in one table, one pool
// per process, rows past their time swept in the background. (It needs a
// server, so it does not run as a test.)
func Example() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app:secret@tcp(db.internal:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := mysqlstore.SetupSchema(ctx, db); err != nil {
		log.Fatal(err)
	}
	s, err := mysqlstore.New(db, mysqlstore.WithMaxResponseBytes(1<<20))
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

// Work that writes to the same database commits its writes with its
// outcome: if the process dies before the commit, neither exists and a
// retry runs the work again; once the commit is in, a retry replays.
func ExampleTx() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app:secret@tcp(db.internal:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	s, err := mysqlstore.New(db)
	if err != nil {
		log.Fatal(err)
	}
	guard, err := middleware.New(s)
	if err != nil {
		log.Fatal(err)
	}
	id, _, err := middleware.Do(ctx, guard, "order:42", "payload", func(ctx context.Context) (int64, error) {
		tx, err := mysqlstore.Tx(ctx) // begun on first use; the guard commits it
		if err != nil {
			return 0, err
		}
		res, err := tx.ExecContext(ctx, "INSERT INTO orders (customer, cents) VALUES (?, ?)", "c-7", 1999)
		if err != nil {
			return 0, err
		}
		return res.LastInsertId()
	})
	fmt.Println(id, err)
}

// An operator looks at one record and forgets it, so that a retry runs the
// work again. Keys are stored as their bytes:
//
//	SELECT state, fence, FROM_UNIXTIME(expires_at / 1e6) FROM idemkit_records WHERE record_key = 'idempotency:charge:order-42';
func ExampleStore_Delete() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "ops@tcp(db.internal:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	s, err := mysqlstore.New(db)
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
