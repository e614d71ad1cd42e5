package pgstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// stepOrder inserts an order row of key in the transaction ctx carries.
func stepOrder(ctx context.Context, orders, key, who string) error {
	tx, err := Tx(ctx)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+orders+` (key, who) VALUES ($1, $2)`, key, who)
	return err
}

// stepWork returns the unit of work of claim c as a store.StepWork.
func stepWork(t *testing.T, s *Store, c store.Record) (context.Context, store.Work, store.StepWork) {
	t.Helper()
	ctx, w := s.Work(t.Context(), c.Key, c.Fence)
	sw, ok := w.(store.StepWork)
	if !ok {
		t.Fatalf("the work of a pool store is no store.StepWork: %T", w)
	}
	return ctx, w, sw
}

// TestTxStepCommitsWithItsRecoveryPoint: a step's writes in its own
// transaction and its recovery point land together, visible to others
// only once the step returns; a step that never takes the transaction is
// recorded as RecordStep records it; the work's own transaction, begun
// after the steps, completes the record; a step once that transaction
// began is refused before its fn runs.
func TestTxStepCommitsWithItsRecoveryPoint(t *testing.T) {
	t.Parallel()
	s, admin, orders := stepStore(t)
	const k = "tx-step"
	c := mustClaimKey(t, s, k, fp, time.Minute)
	ctx, w, sw := stepWork(t, s, c)
	result, ok, err := sw.Step(ctx, 0, "reserve", time.Hour, func(ctx context.Context) ([]byte, error) {
		if err := stepOrder(ctx, orders, k, "reserve"); err != nil {
			return nil, err
		}
		tx, err := Tx(ctx)
		if err != nil {
			return nil, err
		}
		if err := tx.Commit(ctx); !errors.Is(err, ErrGuardCommits) {
			t.Errorf("the step's Commit: %v; want ErrGuardCommits", err)
		}
		// Not yet visible: neither the row nor the step.
		if who := orderRows(t, admin, orders, k); len(who) != 0 {
			t.Errorf("the step's row is visible before the step returned: %q", who)
		}
		if got, _, _ := s.Get(t.Context(), k); len(got.Steps) != 0 {
			t.Errorf("the step is recorded before it returned: %+v", got.Steps)
		}
		return []byte("r-1"), nil
	})
	if err != nil || !ok || string(result) != "r-1" {
		t.Fatalf("Step: %q, %v, %v; want r-1, true", result, ok, err)
	}
	if who := orderRows(t, admin, orders, k); strings.Join(who, ",") != "reserve" {
		t.Fatalf("rows after the step: %q; want its one", who)
	}
	if w.Begun() {
		t.Fatal("the step's transaction counts as the work's")
	}
	// Without the transaction: one RecordStep.
	if _, ok, err := sw.Step(ctx, 1, "notify", time.Hour, func(context.Context) ([]byte, error) { return []byte("n"), nil }); !ok || err != nil {
		t.Fatalf("a step without a transaction: %v, %v", ok, err)
	}
	got, _, err := s.Get(t.Context(), k)
	if err != nil || len(got.Steps) != 2 || got.Steps[0].Name != "reserve" || string(got.Steps[0].Result) != "r-1" || got.Steps[1].Name != "notify" {
		t.Fatalf("Get after the steps: %+v, %v; want reserve=r-1, notify=n", got.Steps, err)
	}
	// The work's own transaction, after the steps.
	if err := stepOrder(ctx, orders, k, "work"); err != nil {
		t.Fatal(err)
	}
	ran := false
	_, ok, err = sw.Step(ctx, 2, "late", time.Hour, func(context.Context) ([]byte, error) { ran = true; return nil, nil })
	if ok || ran || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("a step once the work's transaction began: %v, ran %v, %v; want InvalidArgument without running", ok, ran, err)
	}
	if ok, err := w.Commit(t.Context(), store.Record{Key: k, Fingerprint: fp, State: store.StateCompleted, Fence: c.Fence, Response: []byte("done")}, time.Minute); !ok || err != nil {
		t.Fatalf("the work's Commit: %v, %v", ok, err)
	}
	if who := orderRows(t, admin, orders, k); strings.Join(who, ",") != "reserve,work" {
		t.Fatalf("rows after the work: %q; want reserve,work", who)
	}
}

// TestTxStepOfAStaleHolderLeavesNothing: a holder whose claim was taken
// over while its step ran cannot commit the step: its writes are rolled
// back, the step is not recorded, and Step reports false.
func TestTxStepOfAStaleHolderLeavesNothing(t *testing.T) {
	t.Parallel()
	s, admin, orders := stepStore(t)
	const k = "tx-step-stale"
	c := mustClaimKey(t, s, k, fp, 50*time.Millisecond)
	ctx, _, sw := stepWork(t, s, c)
	var taker store.Record
	_, ok, err := sw.Step(ctx, 0, "charge", time.Hour, func(ctx context.Context) ([]byte, error) {
		if err := stepOrder(ctx, orders, k, "stale"); err != nil {
			return nil, err
		}
		// The lease runs out and another process takes the key over.
		time.Sleep(100 * time.Millisecond)
		taker = mustClaimKey(t, s, k, fp, time.Minute)
		return []byte("ch_1"), nil
	})
	if ok || err != nil {
		t.Fatalf("the stale holder's step: %v, %v; want false without an error", ok, err)
	}
	if taker.Fence <= c.Fence {
		t.Fatalf("the taker's fence %v; want above %v", taker.Fence, c.Fence)
	}
	if who := orderRows(t, admin, orders, k); len(who) != 0 {
		t.Fatalf("the stale holder's step left rows %q; want none", who)
	}
	got, _, err := s.Get(t.Context(), k)
	if err != nil || got.Fence != taker.Fence || len(got.Steps) != 0 {
		t.Fatalf("the taker's record: %+v, %v; want its claim without steps", got, err)
	}
	if st := s.db.(*pgxpool.Pool).Stat(); st.AcquiredConns() != 0 {
		t.Fatalf("%d connections still held after the step", st.AcquiredConns())
	}
}

// TestTxStepThatFailsLeavesNothing: a step whose fn fails, panics, returns
// a result too large to record, or whose own transaction failed, leaves
// neither its writes nor its recovery point, and frees its connection;
// the claim is still the holder's, which then records the step.
func TestTxStepThatFailsLeavesNothing(t *testing.T) {
	t.Parallel()
	s, admin, orders := stepStore(t)
	const k = "tx-step-fails"
	c := mustClaimKey(t, s, k, fp, time.Minute)
	ctx, _, sw := stepWork(t, s, c)
	boom := errors.New("the payment provider said no")
	writeThen := func(then func(ctx context.Context) ([]byte, error)) func(ctx context.Context) ([]byte, error) {
		return func(ctx context.Context) ([]byte, error) {
			if err := stepOrder(ctx, orders, k, "failed"); err != nil {
				return nil, err
			}
			return then(ctx)
		}
	}
	nothing := func(what string) {
		t.Helper()
		if who := orderRows(t, admin, orders, k); len(who) != 0 {
			t.Fatalf("%s: rows %q; want none", what, who)
		}
		if got, _, _ := s.Get(t.Context(), k); got.Fence != c.Fence || len(got.Steps) != 0 {
			t.Fatalf("%s: the record %+v; want the claim without steps", what, got)
		}
		if st := s.db.(*pgxpool.Pool).Stat(); st.AcquiredConns() != 0 {
			t.Fatalf("%s: %d connections still held", what, st.AcquiredConns())
		}
	}

	_, ok, err := sw.Step(ctx, 0, "charge", time.Hour, writeThen(func(context.Context) ([]byte, error) { return nil, boom }))
	if ok || err != boom {
		t.Fatalf("a step whose fn failed: %v, %v; want false and fn's error as it is", ok, err)
	}
	nothing("fn failed")

	func() {
		defer func() {
			if p := recover(); p != "crash" {
				t.Fatalf("the step's panic: %v; want it to go on", p)
			}
		}()
		_, _, _ = sw.Step(ctx, 0, "charge", time.Hour, writeThen(func(context.Context) ([]byte, error) { panic("crash") }))
	}()
	nothing("fn panicked")

	_, ok, err = sw.Step(ctx, 0, "charge", time.Hour, writeThen(func(context.Context) ([]byte, error) {
		return make([]byte, store.MaxStepBytes), nil
	}))
	if ok || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("a step whose result is too large: %v, %v; want InvalidArgument, ErrTooLarge", ok, err)
	}
	nothing("result too large")

	_, ok, err = sw.Step(ctx, 0, "charge", time.Hour, writeThen(func(ctx context.Context) ([]byte, error) {
		tx, _ := Tx(ctx)
		_, _ = tx.Exec(ctx, `SELECT 1/0`) // ignored: the transaction is aborted
		return []byte("ch_1"), nil
	}))
	if ok || !errors.Is(err, store.ErrWorkFailed) {
		t.Fatalf("a step whose transaction failed: %v, %v; want ErrWorkFailed", ok, err)
	}
	nothing("the step's transaction failed")

	// The claim is still the holder's: the step lands.
	if _, ok, err := sw.Step(ctx, 0, "charge", time.Hour, writeThen(func(context.Context) ([]byte, error) { return []byte("ch_1"), nil })); !ok || err != nil {
		t.Fatalf("the step after the failures: %v, %v", ok, err)
	}
	if who := orderRows(t, admin, orders, k); len(who) != 1 {
		t.Fatalf("rows after the step landed: %q; want one", who)
	}
}
