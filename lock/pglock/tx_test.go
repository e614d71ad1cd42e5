package pglock

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
)

// TestInTransaction builds lockers on pgx.Tx values: every operation works
// inside the caller's transaction, takes effect only when it commits, and
// leaves the transaction's own settings (synchronous_commit) alone.
func TestInTransaction(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opts := tables(t, admin)
	observer, err := New(admin, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	conn := connect(t, srv.URL)
	const k = "tx/key"

	// Acquire, contend, extend and look up inside one transaction.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := SetupSchema(ctx, tx, opts...); err != nil {
		t.Fatalf("SetupSchema in a transaction: %v", err)
	}
	l, err := New(tx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	lease, ok, err := l.Acquire(ctx, k, time.Minute)
	if err != nil || !ok || lease.Fence < 1 {
		t.Fatalf("Acquire in a transaction: %+v, %v, %v", lease, ok, err)
	}
	if _, ok, err := l.Acquire(ctx, k, time.Minute); err != nil || ok {
		t.Fatalf("second Acquire in the transaction: %v, %v; want locked", ok, err)
	}
	if out, err := l.Extend(ctx, lease.ID, 2*time.Minute); err != nil || !out.OK {
		t.Fatalf("Extend in a transaction: %+v, %v", out, err)
	}
	if info, ok, err := l.LookupID(ctx, lease.ID); err != nil || !ok || info.Fence != lease.Fence {
		t.Fatalf("LookupID in a transaction: %v, %v, %v", info, ok, err)
	}
	if locked, err := observer.IsLocked(ctx, k); err != nil || locked {
		t.Fatalf("another connection sees the lock before the commit: %v, %v", locked, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if locked, err := observer.IsLocked(ctx, k); err != nil || !locked {
		t.Fatalf("the lock is not visible after the commit: %v, %v", locked, err)
	}

	// A release in a transaction that rolls back leaves the lock held,
	// and does not touch the transaction's synchronous_commit.
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l, _ = New(tx, opts...)
	if out, err := l.Release(ctx, lease.ID); err != nil || !out.OK {
		t.Fatalf("Release in a transaction: %+v, %v", out, err)
	}
	var sc string
	if err := tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&sc); err != nil || sc != "on" {
		t.Fatalf("synchronous_commit in the caller's transaction after Release: %q, %v; want on", sc, err)
	}
	if n, err := l.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep in a transaction: %d, %v", n, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if info, ok, err := observer.LookupID(ctx, lease.ID); err != nil || !ok || info.Fence != lease.Fence {
		t.Fatalf("the rolled-back release took effect: %v, %v, %v", info, ok, err)
	}

	// A contended acquire writes nothing and takes no row lock: the
	// transaction it ran in has no transaction id.
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l, _ = New(tx, opts...)
	if _, ok, err := l.Acquire(ctx, k, time.Minute); err != nil || ok {
		t.Fatalf("Acquire of a held key: %v, %v; want locked", ok, err)
	}
	var xid *int64
	if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id_if_assigned()::text::bigint").Scan(&xid); err != nil || xid != nil {
		t.Fatalf("a contended acquire was assigned a transaction id (it wrote or locked a row): %v, %v", xid, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// A failed statement inside the locker's savepoint leaves the caller's
	// transaction usable.
	const full = "tx/full"
	if err := newProbes(t, admin, opts).raiseFence(ctx, full, idemkit.FenceMax); err != nil {
		t.Fatal(err)
	}
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	l, _ = New(tx, opts...)
	if out, err := l.Release(ctx, lease.ID); err != nil || !out.OK {
		t.Fatalf("Release: %+v, %v", out, err)
	}
	if _, _, err := l.Acquire(ctx, full, time.Minute); idemkit.CodeOf(err) != idemkit.CodeInternal {
		t.Fatalf("Acquire past the maximum fence: %v; want Internal", err)
	}
	var one int
	if err := tx.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("the caller's transaction is broken after a refused acquire: %v", err)
	}
}
