package pgstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/sweepertest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/pglock/pgtest"
	"github.com/idemkit/idemkit/store"
)

// TestSweep checks that Sweep deletes, in batches, exactly the expired
// records.
func TestSweep(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := pgtest.NewPool(t, srv.URL, 2)
	opt := table(t, admin)
	s, err := New(pgtest.NewPool(t, srv.URL, 2), opt, WithSweepBatch(2))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	put := func(k string, ttl time.Duration) {
		t.Helper()
		if ok, err := s.Put(ctx, store.Record{Key: k, State: store.StateCompleted, Fence: 1}, ttl); err != nil || !ok {
			t.Fatalf("Put: %v, %v", ok, err)
		}
	}
	const expired = 5
	for i := range expired {
		put(fmt.Sprint("old/", i), time.Millisecond)
	}
	put("live", time.Hour)
	time.Sleep(margin)
	n, err := s.Sweep(ctx)
	if err != nil || n != expired {
		t.Fatalf("Sweep = %d, %v; want %d", n, err, expired)
	}
	var rows int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+s.cfg.table.Sanitize()).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("%d rows left (%v); want only the live one", rows, err)
	}
	if _, ok, err := s.Get(ctx, "live"); err != nil || !ok {
		t.Fatalf("the live record: %v, %v", ok, err)
	}
	if n, err := s.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("second Sweep = %d, %v", n, err)
	}
}

// TestSweeper checks the background sweeper collects expired records, logs
// failures without keys, and stops.
func TestSweeper(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := pgtest.NewPool(t, srv.URL, 2)
	opt := table(t, admin)
	var logs sweepertest.Logs
	pool := pgtest.NewPool(t, srv.URL, 2)
	s, err := New(pool, opt, WithLogger(logs.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(t.Context(), store.Record{Key: "secret-key", State: store.StateCompleted}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	sweepertest.Run(t, sweepertest.Sweeper{
		Start: s.StartSweeper,
		Collected: func(ctx context.Context) (bool, error) {
			var rows int
			err := admin.QueryRow(ctx, "SELECT count(*) FROM "+s.cfg.table.Sanitize()).Scan(&rows)
			return rows == 0, err
		},
		Break:   pool.Close,
		Logs:    &logs,
		Message: "pgstore: sweeping expired records failed",
		Secret:  "secret-key",
	})
}

// TestInTransaction uses a store on a pgx.Tx: writes are visible to others
// only after the commit.
func TestInTransaction(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := pgtest.NewPool(t, srv.URL, 2)
	opt := table(t, admin)
	observer, _ := New(admin, opt)
	ctx := t.Context()
	conn := pgtest.Connect(t, srv.URL)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	s, err := New(tx, opt)
	if err != nil {
		t.Fatal(err)
	}
	rec := store.Record{Key: "k", Fingerprint: "fp", State: store.StateCompleted, Response: []byte("r"), Fence: 3}
	if ok, err := s.Put(ctx, rec, time.Hour); err != nil || !ok {
		t.Fatalf("Put in a transaction: %v, %v", ok, err)
	}
	if got, ok, err := s.Get(ctx, "k"); err != nil || !ok || string(got.Response) != "r" || got.Fence != 3 {
		t.Fatalf("Get in the transaction: %+v, %v, %v", got, ok, err)
	}
	rec.Fence = 2
	if ok, err := s.Put(ctx, rec, time.Hour); err != nil || ok {
		t.Fatalf("a lower fence in the transaction: %v, %v; want refused", ok, err)
	}
	if _, ok, err := observer.Get(ctx, "k"); err != nil || ok {
		t.Fatalf("another connection sees the record before the commit: %v, %v", ok, err)
	}
	if n, err := s.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep in a transaction: %d, %v", n, err)
	}
	var sc string
	if err := tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&sc); err != nil || sc != "on" {
		t.Fatalf("synchronous_commit in the caller's transaction: %q, %v", sc, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := observer.Get(ctx, "k"); err != nil || !ok || got.Fence != 3 {
		t.Fatalf("the committed record: %+v, %v, %v", got, ok, err)
	}
}
