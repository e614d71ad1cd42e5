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

// A locker on a connection pool, with the tables created at start-up and a
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
	}, lock.WithTTL(10*time.Second))
	if errors.Is(err, idemkit.ErrAcquisitionTimeout) {
		fmt.Println("busy")
	}
}

// Table names are options, validated and quoted; SetupSchema and New take
// the same ones.
func ExampleNew_tableNames() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	opts := []pglock.Option{pglock.WithTable("infra.locks"), pglock.WithFenceTable("infra.lock_fences")}
	if err := pglock.SetupSchema(ctx, pool, opts...); err != nil {
		log.Fatal(err)
	}
	locker, err := pglock.New(pool, opts...)
	if err != nil {
		log.Fatal(err)
	}
	lease, ok, err := locker.Acquire(ctx, "report:daily", 30*time.Second)
	if err != nil || !ok {
		return // failed, or held by someone else
	}
	defer func() { _, _ = locker.ReleaseKey(context.WithoutCancel(ctx), lease.Key, lease.ID) }()
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

// The DDL for migration tools, with the default table names.
func ExampleSchemaSQL() {
	_ = pglock.SchemaSQL() // write it to migrations/0001_idemkit_locks.sql
}
