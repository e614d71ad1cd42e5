package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/pglock"
)

// A locker on a connection pool, with the table created at start-up and a
// background sweeper for expired rows. (It needs a server, so it does not
// run as a test.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := pglock.SetupSchema(ctx, pool); err != nil {
		log.Fatal(err)
	}
	locker, err := pglock.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	stop := locker.StartSweeper(ctx, time.Minute)
	defer stop()

	err = lock.Do(ctx, locker, "invoice:2026-11", func(ctx context.Context, lease lock.Lease) error {
		// Pass lease.Fence to the resource, which refuses older fences.
		fmt.Println("holding fence", lease.Fence)
		return nil
	}, lock.WithTTL(10*time.Second), lock.WithTimeout(5*time.Second))
	if errors.Is(err, idemkit.ErrAcquisitionTimeout) {
		fmt.Println("busy")
	}
}

// Every call is bounded by its ctx: a server that stops answering gives a
// NetworkTimeout (or ServiceUnavailable) error when the deadline passes,
// never a hang.
func ExampleLocker_Acquire() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	locker, err := pglock.New(pool, pglock.WithTable("infra.locks"))
	if err != nil {
		log.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	lease, ok, err := locker.Acquire(actx, "report:daily", 30*time.Second)
	switch {
	case err != nil:
		log.Printf("lock unavailable (%v): %v", idemkit.CodeOf(err), err)
		return
	case !ok:
		return // held by someone else
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_, _ = locker.ReleaseKey(rctx, lease.Key, lease.ID)
	}()
	// ... work, passing lease.Fence along ...
}

// A lock taken inside a transaction takes effect when it commits, together
// with the transaction's other writes.
func ExampleNew_transaction() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, "postgres://app@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	locker, err := pglock.New(tx)
	if err != nil {
		log.Fatal(err)
	}
	if _, ok, err := locker.Acquire(ctx, "migration", time.Hour); err != nil || !ok {
		return
	}
	if _, err := tx.Exec(ctx, "UPDATE settings SET value = 'maintenance' WHERE name = 'mode'"); err != nil {
		return
	}
	_ = tx.Commit(ctx)
}

// The DDL for migration tools, with the default table name.
func ExampleSchemaSQL() {
	_ = pglock.SchemaSQL() // write it to migrations/0001_idemkit_locks.sql
}
