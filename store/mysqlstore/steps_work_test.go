package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
)

// stepTx sets up an atomic-step test: a store on a pool of its own, the
// operator's pool, and the orders table in the records' database (a row
// per order, with the key and step it was written under).
func stepTx(t *testing.T) (s *Store, admin DB, orders string) {
	t.Helper()
	srv := testenv.MySQL(t)
	a := newDB(t, srv.DSN, 2, nil)
	opt := table(t, a)
	s, err := New(newDB(t, srv.DSN, 4, nil), opt)
	if err != nil {
		t.Fatal(err)
	}
	orders = strings.TrimSuffix(tableOf(s), "`records`") + "`orders`"
	if _, err := a.ExecContext(t.Context(), `CREATE TABLE `+orders+` (id BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(255) NOT NULL, step VARCHAR(64) NOT NULL) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	return s, a, orders
}

// workOf returns the step runner of the claim c's work.
func workOf(t *testing.T, s *Store, c store.Record) (context.Context, store.StepWork) {
	t.Helper()
	ctx, w := s.Work(t.Context(), c.Key, c.Fence)
	sw, ok := w.(store.StepWork)
	if !ok {
		t.Fatalf("the store's work (%T) runs no steps", w)
	}
	return ctx, sw
}

// insertStepOrder writes an order row in the transaction of ctx's work.
func insertStepOrder(ctx context.Context, orders, key, step string) error {
	tx, err := Tx(ctx)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO `+orders+` (k, step) VALUES (?, ?)`, key, step)
	return err
}

func countOrders(t *testing.T, admin DB, orders, key string) int {
	t.Helper()
	var n int
	if err := admin.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM `+orders+` WHERE k = ?`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStepTxCommitsWithItsRecoveryPoint: a step whose fn writes through
// Tx commits its rows and its recovery point together: neither is seen
// before Step returns, both after; a take-over then carries the step, and
// the work's own transaction begins after it as usual.
func TestStepTxCommitsWithItsRecoveryPoint(t *testing.T) {
	t.Parallel()
	s, admin, orders := stepTx(t)
	c := mustClaimKey(t, s, "k1", fp, 50*time.Millisecond)
	ctx, w := workOf(t, s, c)
	result, ok, err := w.Step(ctx, 0, "charge", time.Hour, func(ctx context.Context) ([]byte, error) {
		if err := insertStepOrder(ctx, orders, "k1", "charge"); err != nil {
			return nil, err
		}
		if n := countOrders(t, admin, orders, "k1"); n != 0 {
			t.Errorf("%d rows of the step seen before it committed", n)
		}
		if got, _, _ := s.Get(t.Context(), "k1"); len(got.Steps) != 0 {
			t.Errorf("the step's record seen before it committed: %q", stepNames(got.Steps))
		}
		return []byte("ch_1"), nil
	})
	if err != nil || !ok || string(result) != "ch_1" {
		t.Fatalf("Step: %q, %v, %v; want ch_1 landed", result, ok, err)
	}
	if n := countOrders(t, admin, orders, "k1"); n != 1 {
		t.Fatalf("%d rows after the step; want 1", n)
	}
	got, _, err := s.Get(t.Context(), "k1")
	if err != nil || stepNames(got.Steps) != "charge=ch_1" {
		t.Fatalf("Get after the step: %q, %v; want charge=ch_1", stepNames(got.Steps), err)
	}
	// A step that writes nothing is recorded as RecordStep records it.
	if result, ok, err := w.Step(ctx, 1, "email", time.Hour, func(context.Context) ([]byte, error) { return nil, nil }); err != nil || !ok || len(result) != 0 {
		t.Fatalf("a step without a transaction: %q, %v, %v", result, ok, err)
	}
	time.Sleep(50*time.Millisecond + margin)
	n := mustClaimKey(t, s, "k1", fp, time.Minute)
	if stepNames(n.Steps) != "charge=ch_1,email=" {
		t.Fatalf("the take-over's steps: %q; want charge=ch_1,email=", stepNames(n.Steps))
	}
	// The work's own transaction, then no more steps.
	ctx, w = workOf(t, s, n)
	if _, err := Tx(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := w.Step(ctx, 2, "late", time.Hour, func(context.Context) ([]byte, error) {
		t.Error("fn of a step after the work's transaction began ran")
		return nil, nil
	}); ok || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("a step after the work's transaction began: %v, %v; want InvalidArgument", ok, err)
	}
	w.(*work).Rollback(t.Context())
}

// TestStepTxOfAStaleHolderLeavesNoRows: the step of a holder whose claim
// was taken over writes neither its rows nor its step (Step reports it
// refused), and a step at an index already recorded is refused the same
// way.
func TestStepTxOfAStaleHolderLeavesNoRows(t *testing.T) {
	t.Parallel()
	s, admin, orders := stepTx(t)
	c := mustClaimKey(t, s, "k1", fp, 50*time.Millisecond)
	time.Sleep(50*time.Millisecond + margin)
	n := mustClaimKey(t, s, "k1", fp, time.Minute)
	stale := func(ctx context.Context) ([]byte, error) {
		return []byte("old"), insertStepOrder(ctx, orders, "k1", "stale")
	}
	ctx, w := workOf(t, s, c)
	if result, ok, err := w.Step(ctx, 0, "charge", time.Hour, stale); err != nil || ok || result != nil {
		t.Fatalf("the stale holder's step: %q, %v, %v; want refused", result, ok, err)
	}
	if k := countOrders(t, admin, orders, "k1"); k != 0 {
		t.Fatalf("%d rows of the stale holder's step; want none", k)
	}
	ctx, w = workOf(t, s, n)
	mustStep(t, s, n, 0, "charge", "ch_1", time.Hour)
	if _, ok, err := w.Step(ctx, 0, "charge", time.Hour, stale); err != nil || ok {
		t.Fatalf("a step at an index already recorded: %v, %v; want refused", ok, err)
	}
	if k := countOrders(t, admin, orders, "k1"); k != 0 {
		t.Fatalf("%d rows of the refused step; want none", k)
	}
	if got, _, _ := s.Get(t.Context(), "k1"); stepNames(got.Steps) != "charge=ch_1" {
		t.Fatalf("the holder's steps: %q; want charge=ch_1", stepNames(got.Steps))
	}
}

// TestStepTxRolledBackOnFailure: fn's error, fn's panic and a result too
// large for a step roll fn's rows back and record no step; the error
// comes back as it is, the panic goes on.
func TestStepTxRolledBackOnFailure(t *testing.T) {
	t.Parallel()
	s, admin, orders := stepTx(t)
	c := mustClaimKey(t, s, "k1", fp, time.Minute)
	ctx, w := workOf(t, s, c)
	boom := errors.New("boom")
	if _, ok, err := w.Step(ctx, 0, "charge", time.Hour, func(ctx context.Context) ([]byte, error) {
		return nil, errors.Join(insertStepOrder(ctx, orders, "k1", "failed"), boom)
	}); ok || !errors.Is(err, boom) {
		t.Fatalf("a step whose fn failed: %v, %v; want its error", ok, err)
	}
	if _, ok, err := w.Step(ctx, 0, "charge", time.Hour, func(ctx context.Context) ([]byte, error) {
		return make([]byte, store.MaxStepBytes), insertStepOrder(ctx, orders, "k1", "too large")
	}); ok || !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("a step whose result is too large: %v, %v; want ErrTooLarge", ok, err)
	}
	func() {
		defer func() {
			if r := recover(); r != "panicked" {
				t.Fatalf("recovered %v; want fn's panic", r)
			}
		}()
		_, _, _ = w.Step(ctx, 0, "charge", time.Hour, func(ctx context.Context) ([]byte, error) {
			if err := insertStepOrder(ctx, orders, "k1", "panicked"); err != nil {
				t.Error(err)
			}
			panic("panicked")
		})
	}()
	if k := countOrders(t, admin, orders, "k1"); k != 0 {
		t.Fatalf("%d rows of failed steps; want none", k)
	}
	if result, ok, err := w.Step(ctx, 0, "charge", time.Hour, func(ctx context.Context) ([]byte, error) {
		return []byte("ch_1"), insertStepOrder(ctx, orders, "k1", "charge")
	}); err != nil || !ok || string(result) != "ch_1" {
		t.Fatalf("the step after the failures: %q, %v, %v", result, ok, err)
	}
	if k := countOrders(t, admin, orders, "k1"); k != 1 {
		t.Fatalf("%d rows after the step that landed; want 1", k)
	}
	if got, _, _ := s.Get(t.Context(), "k1"); stepNames(got.Steps) != "charge=ch_1" {
		t.Fatalf("the steps: %q; want charge=ch_1", stepNames(got.Steps))
	}
	if _, _, err := w.Step(ctx, store.MaxSteps, "x", time.Hour, func(context.Context) ([]byte, error) {
		t.Error("fn of an invalid step ran")
		return nil, nil
	}); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("index MaxSteps: %v; want InvalidArgument", err)
	}
}

// TestStepTxDeadlockFailsTheStep: a statement of the step's fn loses a
// deadlock (InnoDB rolls the step's whole transaction back) and fn
// returns as if it had not: the step fails with store.ErrWorkConflict,
// nothing of it lands (neither its write nor its recovery point), and the
// step can run again.
func TestStepTxDeadlockFailsTheStep(t *testing.T) {
	t.Parallel()
	s, admin, _ := stepTx(t)
	ctx := t.Context()
	accounts := strings.TrimSuffix(tableOf(s), "`records`") + "`accounts`"
	if _, err := admin.ExecContext(ctx, `CREATE TABLE `+accounts+` (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	// Row 1 for the step; rows 2 to 201 for the other transaction, which
	// changes them all and so weighs more: InnoDB rolls the step back.
	var values []string
	for id := 1; id <= 201; id++ {
		values = append(values, fmt.Sprintf("(%d, 0)", id))
	}
	if _, err := admin.ExecContext(ctx, `INSERT INTO `+accounts+` VALUES `+strings.Join(values, ", ")); err != nil {
		t.Fatal(err)
	}
	pool := admin.(*sql.DB)
	c := mustClaimKey(t, s, "deadlock", fp, time.Minute)
	wctx, w := workOf(t, s, c)
	other := make(chan error, 1)
	var deadlocked error
	_, ok, err := w.Step(wctx, 0, "charge", time.Hour, func(ctx context.Context) ([]byte, error) {
		tx, err := Tx(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+accounts+` SET n = n + 1 WHERE id = 1`); err != nil {
			return nil, err
		}
		otx, err := pool.BeginTx(t.Context(), nil)
		if err != nil {
			return nil, err
		}
		if _, err := otx.ExecContext(ctx, `UPDATE `+accounts+` SET n = n + 1 WHERE id >= 2`); err != nil {
			return nil, err
		}
		go func() { // waits for the step's row 1
			_, err := otx.ExecContext(context.WithoutCancel(ctx), `UPDATE `+accounts+` SET n = n + 1 WHERE id = 1`)
			if err == nil {
				err = otx.Commit()
			} else {
				_ = otx.Rollback()
			}
			other <- err
		}()
		time.Sleep(300 * time.Millisecond) // the other transaction now waits for row 1
		_, deadlocked = tx.ExecContext(ctx, `UPDATE `+accounts+` SET n = n + 1 WHERE id = 2`)
		return []byte("charged"), nil // as if fn had not seen its statement fail
	})
	if oerr := <-other; oerr != nil {
		t.Fatalf("the other transaction: %v; want it to win the deadlock and commit", oerr)
	}
	var me *mysql.MySQLError
	if !errors.As(deadlocked, &me) || me.Number != erLockDeadlock {
		t.Fatalf("the step's statement: %v; want a deadlock (1213)", deadlocked)
	}
	if ok || !errors.Is(err, store.ErrWorkConflict) {
		t.Fatalf("the step: %v, %v; want store.ErrWorkConflict", ok, err)
	}
	var n int
	if err := admin.QueryRowContext(ctx, `SELECT n FROM `+accounts+` WHERE id = 1`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("row 1: n = %d, %v; want 1, the other transaction's write alone", n, err)
	}
	if got, _, _ := s.Get(ctx, "deadlock"); len(got.Steps) != 0 {
		t.Fatalf("steps after the failed step: %q; want none", stepNames(got.Steps))
	}
	if _, ok, err := w.Step(wctx, 0, "charge", time.Hour, func(context.Context) ([]byte, error) { return []byte("again"), nil }); err != nil || !ok {
		t.Fatalf("the step run again: %v, %v", ok, err)
	}
}
