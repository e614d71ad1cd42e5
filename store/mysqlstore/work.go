package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

var (
	_ store.Transactor = (*Store)(nil)
	_ store.StepWork   = (*work)(nil)
)

// ErrNoTransaction is what [Tx] returns outside work guarded by a [Store]
// on a *sql.DB.
var ErrNoTransaction = errors.New("mysqlstore: no transaction: the context is not that of work guarded by a mysqlstore.Store over a *sql.DB")

// Tx returns the transaction of the guarded work whose context is ctx,
// begun on the first call on a connection of the pool held until the work
// ends, at the isolation level of [WithTxIsolation]. While works hold
// transactions, the store keeps one more connection of the pool for their
// lease renewals, so that they never wait behind the work: give the
// *sql.DB (SetMaxOpenConns) room for the transactional requests that run at
// once, plus one. The guard completes the record
// in it, under the claim's fence, and commits both at once. A claim taken
// over or a lease lost before the work returned rolls it back
// (idemkit.ErrLeaseLost), as do an error, a panic, an outcome not stored
// and middleware.DoNotRecord, releasing the claim. The returned DB has no
// Commit or Rollback: the guard ends the transaction (SAVEPOINT and
// ROLLBACK TO SAVEPOINT work). A deadlock that InnoDB answered to one of
// its statements rolled the whole transaction back: the guard's commit
// then fails with store.ErrWorkConflict, even if the work went on. Within
// an atomic step of the work, Tx returns the step's own transaction,
// which commits with the step's recovery point; the work's own begins
// after its last step. Outside guarded work: [ErrNoTransaction].
// docs/backends.md (Exactly-once effects) tells the whole contract.
func Tx(ctx context.Context) (DB, error) {
	w, ok := ctx.Value(workKey{}).(*work)
	if !ok {
		return nil, ErrNoTransaction
	}
	return w.begin(ctx)
}

// workKey is the context key of the guarded work's *work.
type workKey struct{}

// Work implements [store.Transactor]: the work of the claim (key, fence),
// whose transaction [Tx] begins. Only a store on a *sql.DB has one: on a
// *sql.Conn the renewals of the claim's lease would run inside the work's
// transaction, invisible to the other processes until it commits, and a
// *sql.Tx is the caller's.
func (s *Store) Work(ctx context.Context, key string, fence idemkit.Fence) (context.Context, store.Work) {
	pool, ok := s.db.(*sql.DB)
	if !ok {
		return ctx, nil
	}
	w := &work{s: s, db: pool, key: key, fence: fence}
	return context.WithValue(ctx, workKey{}, w), w
}

// work is one claim's transaction: begun by Tx, ended by the guard (or,
// for a step's own, by Step).
type work struct {
	s     *Store
	db    *sql.DB
	key   string        // the claim's record key
	fence idemkit.Fence // and its fence

	mu       sync.Mutex
	tx       *sql.Tx // nil until begun
	ended    bool    // committed or rolled back: Tx refuses to begin again
	deadlock error   // a deadlock answered to a statement of the work: InnoDB rolled it all back
}

func (w *work) begin(ctx context.Context) (DB, error) {
	const op = "begin"
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.ended:
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, op, "the guarded work's transaction has ended", nil)
	case w.tx != nil:
		return guardedTx{w}, nil
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return nil, err
	}
	// The renewals' connection first: the transaction may take the
	// pool's last one.
	if err := w.s.renewer.hold(ctx); err != nil {
		return nil, w.s.starvedPool(ctx, mapError(ctx, op, err))
	}
	// database/sql rolls a transaction back when the ctx it began with
	// ends: the guard ends this one, after the work's ctx may have. Its
	// BEGIN alone is bounded by ctx.
	tx, err := beginTx(ctx, w.db, w.s.cfg.txIso)
	if err != nil {
		w.s.renewer.release()
		return nil, w.s.starvedPool(ctx, mapError(ctx, op, err))
	}
	w.tx = tx
	return guardedTx{w}, nil
}

// Begun implements [store.Work].
func (w *work) Begun() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tx != nil
}

// Commit implements [store.Work]: the completion's UPDATE in the
// transaction, then COMMIT; a claim no longer this one's rolls it back.
func (w *work) Commit(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "commit"
	if err := engine.ValidateComplete(rec, ttl); err != nil {
		return false, err
	}
	if err := w.s.checkOutcome(op, rec); err != nil {
		return false, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tx == nil || w.ended {
		return false, idemkit.NewError(idemkit.CodeInvalidArgument, op, "no transaction under way", nil)
	}
	w.end()
	if w.deadlock != nil {
		w.rollback()
		return false, w.failed(ctx, op, w.deadlock)
	}
	n, err := lastID(w.tx.ExecContext(ctx, w.s.q.completeSQL(rec, ttl)))
	if err != nil {
		w.rollback()
		return false, w.failed(ctx, op, err)
	}
	if n == 0 {
		w.rollback()
		return false, nil
	}
	if err := w.tx.Commit(); err != nil {
		return false, w.failed(ctx, op, err)
	}
	return true, nil
}

// failed maps the error of the completion or of COMMIT: a deadlock or a
// lock wait timeout, the transaction's own conflict, wraps
// [store.ErrWorkConflict]; anything else is mapError's.
func (w *work) failed(ctx context.Context, op string, err error) error {
	var me *mysql.MySQLError
	if ctx.Err() != nil || !errors.As(err, &me) {
		return mapError(ctx, op, err)
	}
	if me.Number == erLockDeadlock || me.Number == erLockWaitTimeout {
		return idemkit.NewError(idemkit.CodeServiceUnavailable, op,
			fmt.Sprintf("the work's transaction lost a conflict with a concurrent one (MySQL error %d) and was rolled back", me.Number),
			fmt.Errorf("%w: %w", store.ErrWorkConflict, err))
	}
	return mapError(ctx, op, err)
}

// Rollback implements [store.Work].
func (w *work) Rollback(context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return
	}
	w.end()
	if w.tx != nil {
		w.rollback()
	}
}

// end marks the transaction ended, once: its renewals no longer need the
// renewer's connection. The caller holds w.mu.
func (w *work) end() {
	if w.ended {
		return
	}
	w.ended = true
	if w.tx != nil {
		w.s.renewer.release()
	}
}

// beginTx begins a transaction on db that outlives ctx, waiting for a
// connection and sending BEGIN within ctx.
func beginTx(ctx context.Context, db *sql.DB, iso sql.IsolationLevel) (*sql.Tx, error) {
	type begun struct {
		tx  *sql.Tx
		err error
	}
	done := make(chan begun, 1)
	go func() {
		tx, err := db.BeginTx(context.WithoutCancel(ctx), &sql.TxOptions{Isolation: iso})
		done <- begun{tx, err}
	}()
	select {
	case b := <-done:
		return b.tx, b.err
	case <-ctx.Done():
		go func() { // a transaction begun too late is given back
			if b := <-done; b.err == nil {
				_ = b.tx.Rollback()
			}
		}()
		return nil, ctx.Err()
	}
}

// rollback rolls the transaction back, on a connection that may be gone:
// the server rolls back a transaction whose connection closed.
func (w *work) rollback() { _ = w.tx.Rollback() }

// saw records a deadlock answered to one of the work's statements.
func (w *work) saw(err error) {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == erLockDeadlock {
		w.mu.Lock()
		if w.deadlock == nil {
			w.deadlock = err
		}
		w.mu.Unlock()
	}
}

// guardedTx is the work's transaction as Tx returns it: its statements,
// watched for a deadlock; Commit and Rollback are the guard's.
type guardedTx struct{ w *work }

func (g guardedTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := g.w.tx.ExecContext(ctx, query, args...)
	g.w.saw(err)
	return res, err
}

func (g guardedTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	rows, err := g.w.tx.QueryContext(ctx, query, args...)
	g.w.saw(err)
	return rows, err
}

func (g guardedTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	r := g.w.tx.QueryRowContext(ctx, query, args...)
	g.w.saw(r.Err())
	return r
}

// Step runs fn as step number index of the work's claim, named name, in a
// transaction of the step's own that commits with the step's recovery
// point: fn's writes and the step land together or not at all, and a
// retry of the work resumes after the last step that landed. It is the
// guard's, for atomic steps (the exact contract is the store package's
// StepWork, as the PostgreSQL engine's work implements it too).
//
// fn's ctx carries the step's work, whose transaction [Tx] begins on its
// first use (held like the work's, its lease renewals on the renewer's
// connection). When fn succeeds, the step's UPDATE, fenced as
// [Store.RecordStep]'s (the claim (key, fence) with exactly index steps;
// kept at least keep from now), runs in that transaction, then COMMIT. fn
// that never began it has its step recorded by [Store.RecordStep]. Step
// returns fn's result and true once the step landed; false, with fn's
// writes rolled back, when the record no longer carries the claim or
// already has a step at index. fn's error (returned as it is) or panic
// (which goes on) rolls them back too. A deadlock answered to one of fn's
// statements, or to the step's UPDATE or COMMIT, and a lock wait timeout
// of those, wrap [store.ErrWorkConflict]: nothing landed. Arguments
// RecordStep would refuse are refused (InvalidArgument) before fn runs, as
// is a step once the work's own transaction began or ended (steps come
// before it); a result that makes the step too large after fn ran,
// rolling its writes back. Any other failure of the UPDATE or the COMMIT
// leaves the step's fate unknown.
func (w *work) Step(ctx context.Context, index int, name string, keep time.Duration, fn func(ctx context.Context) ([]byte, error)) ([]byte, bool, error) {
	const op = "record-step"
	if err := engine.ValidateStep(w.key, w.fence, index, store.Step{Name: name}, keep); err != nil {
		return nil, false, err
	}
	w.mu.Lock()
	open := w.tx != nil || w.ended
	w.mu.Unlock()
	if open {
		return nil, false, idemkit.NewError(idemkit.CodeInvalidArgument, op,
			"a step cannot run once the guarded work's transaction began or ended: take mysqlstore.Tx after the work's last step", nil)
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return nil, false, err
	}
	sw := &work{s: w.s, db: w.db, key: w.key, fence: w.fence}
	ran := false
	defer func() {
		if !ran { // fn panicked: roll its writes back, then let it go on
			sw.Rollback(ctx)
		}
	}()
	result, err := fn(context.WithValue(ctx, workKey{}, sw))
	ran = true
	step := store.Step{Name: name, Result: result}
	if err == nil {
		err = engine.ValidateStep(w.key, w.fence, index, step, keep)
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	tx := sw.tx
	sw.end()
	if tx == nil {
		if err != nil {
			return nil, false, err
		}
		ok, err := w.s.RecordStep(ctx, w.key, w.fence, index, step, keep)
		if !ok || err != nil {
			return nil, false, err
		}
		return result, true, nil
	}
	if err != nil {
		sw.rollback()
		return nil, false, err
	}
	if sw.deadlock != nil {
		sw.rollback()
		return nil, false, sw.failed(ctx, op, sw.deadlock)
	}
	n, err := lastID(tx.ExecContext(ctx, w.s.q.recordStepSQL(w.key, w.fence, index, encodeStep(step), keep, false)))
	if err != nil || n == 0 {
		sw.rollback()
		if err != nil {
			return nil, false, sw.failed(ctx, op, err)
		}
		return nil, false, nil
	}
	if err := tx.Commit(); err != nil {
		return nil, false, sw.failed(ctx, op, err)
	}
	return result, true, nil
}
