package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

var (
	_ store.Transactor = (*Store)(nil)
	_ store.StepWork   = (*work)(nil)
)

// ErrNoTransaction is what [Tx] returns outside work guarded by a [Store]
// that can begin transactions (on a pool or a connection).
var ErrNoTransaction = errors.New("pgstore: no transaction: the context is not that of work guarded by a pgstore.Store over a pool or a connection")

// ErrGuardCommits is the answer of [Tx]'s transaction to Commit and
// Rollback: the guard ends it (return from the work instead).
var ErrGuardCommits = errors.New("pgstore: the guard commits or rolls back this transaction: return from the work instead")

// beginner is what a [DB] needs to begin transactions: *pgxpool.Pool and
// *pgx.Conn have it.
type beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Tx returns the transaction of the guarded work whose context is ctx,
// begun on the first call on a pool connection held until the work ends.
// The guard completes the record in it, under the claim's fence, and
// commits both at once. A claim taken over or a lease lost before the work
// returned rolls it back (idemkit.ErrLeaseLost), as do an error, a panic,
// an outcome not stored and middleware.DoNotRecord, releasing the claim; a
// transaction that fails by itself fails the call with
// store.ErrWorkFailed or store.ErrWorkConflict. Commit and Rollback answer
// [ErrGuardCommits]; savepoints work. Inside a step of the work
// ([store.StepWork], the guard's middleware.Step), Tx returns the step's
// own transaction instead, which commits with the step's recovery point
// when the step returns (the work's transaction must begin after its last
// step). Outside guarded work: [ErrNoTransaction].
// docs/backends.md (Exactly-once effects) tells the whole contract.
func Tx(ctx context.Context) (pgx.Tx, error) {
	w, ok := ctx.Value(workKey{}).(*work)
	if !ok {
		return nil, ErrNoTransaction
	}
	return w.begin(ctx)
}

// workKey is the context key of the guarded work's *work.
type workKey struct{}

// Work implements [store.Transactor]: the work of the claim (key, fence),
// whose transaction [Tx] begins. A store on a pgx.Tx, or on a DB that
// cannot begin transactions, has none (a nil Work).
func (s *Store) Work(ctx context.Context, key string, fence idemkit.Fence) (context.Context, store.Work) {
	b, ok := s.db.(beginner)
	if !ok || s.inTx {
		return ctx, nil
	}
	w := &work{s: s, db: b, key: key, id: workID{storedKey(key), int64(fence)}}
	return context.WithValue(ctx, workKey{}, w), w
}

// workID names a claim: its stored key and fence.
type workID struct {
	key   string
	fence int64
}

// work is one claim's transaction: begun by Tx, ended by the guard.
type work struct {
	s   *Store
	db  beginner
	key string // the record key
	id  workID

	mu    sync.Mutex
	tx    pgx.Tx // nil until begun
	ended bool   // committed or rolled back: Tx refuses to begin again

	renewed atomic.Bool // the claim's lease was renewed while the transaction was open
}

func (w *work) begin(ctx context.Context) (pgx.Tx, error) {
	const op = "begin"
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.ended:
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, op, "the guarded work's transaction has ended", nil)
	case w.tx != nil:
		return guardedTx{w.tx}, nil
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return nil, err
	}
	if w.s.cfg.txIso != pgx.ReadCommitted {
		// Marked before the snapshot, the row is only read by waiters: a
		// waiter's mark after it would fail the completion (40001).
		if _, err := w.s.mark(ctx, w.id.key); err != nil {
			return nil, w.s.starvedPool(ctx, err)
		}
	}
	tx, err := w.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: w.s.cfg.txIso})
	if err != nil {
		return nil, w.s.starvedPool(ctx, mapError(ctx, op, err))
	}
	w.tx = tx
	w.s.held.Store(w.id, w)
	w.s.renewer.hold(1)
	return guardedTx{tx}, nil
}

// end marks the transaction ended, once: its claim is no longer held by
// it. The caller holds w.mu.
func (w *work) end() {
	if w.ended {
		return
	}
	w.ended = true
	if w.tx != nil {
		w.s.held.Delete(w.id)
		w.s.renewer.hold(-1)
	}
}

// Begun implements [store.Work].
func (w *work) Begun() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tx != nil
}

// Commit implements [store.Work]: the completion's UPDATE in the
// transaction, then a durable commit; a claim no longer this one's rolls
// it back.
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
	tag, err := w.tx.Exec(ctx, w.s.q.complete, storedKey(rec.Key), int64(rec.Fence), int16(rec.State),
		response(rec), []byte(rec.Fingerprint), ttl.Microseconds())
	if err != nil {
		w.rollback(ctx)
		return false, w.failed(ctx, op, err, false)
	}
	if tag.RowsAffected() != 1 {
		w.rollback(ctx)
		return false, nil
	}
	if err := w.tx.Commit(ctx); err != nil {
		return false, w.failed(ctx, op, err, true)
	}
	w.s.ended(w.id.key, true)
	return true, nil
}

// failed maps the error of the completion (atCommit false) or of COMMIT:
// the transaction's own failure wraps [store.ErrWorkFailed] or
// [store.ErrWorkConflict], naming its cause; anything else is mapError's.
func (w *work) failed(ctx context.Context, op string, err error, atCommit bool) error {
	if ctx.Err() != nil {
		return mapError(ctx, op, err)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		if errors.Is(err, pgx.ErrTxCommitRollback) {
			// COMMIT answered ROLLBACK: the transaction had failed.
			return idemkit.NewError(idemkit.CodeInternal, op, "the work's transaction had failed, and COMMIT rolled it back",
				fmt.Errorf("%w: %w", store.ErrWorkFailed, err))
		}
		return mapError(ctx, op, err)
	}
	fail := func(sentinel error, code idemkit.Code, detail string) error {
		return idemkit.NewError(code, op, detail+" (SQLSTATE "+pe.Code+")", fmt.Errorf("%w: %w", sentinel, err))
	}
	switch {
	case pe.Code == "25P02":
		return fail(store.ErrWorkFailed, idemkit.CodeInternal,
			"a statement of the work failed earlier and left its transaction aborted, so it was rolled back; "+
				"work that goes on after a failed statement must roll back to a savepoint (tx.Begin) first")
	case !atCommit && pe.Code == "40001" && w.renewed.Load():
		return fail(store.ErrWorkFailed, idemkit.CodeInternal,
			"the work ran past a renewal of its claim's lease, which changed the record's row after the snapshot of its "+
				strings.ToUpper(string(w.s.cfg.txIso))+" transaction, so the outcome could not be written in it; it was rolled back: "+
				"give the guard a lease TTL over three times what the work takes (middleware.WithLeaseTTL), or use READ COMMITTED")
	case pe.Code == "40001" || pe.Code == "40P01":
		return fail(store.ErrWorkConflict, idemkit.CodeServiceUnavailable,
			"the work's "+strings.ToUpper(string(w.s.cfg.txIso))+" transaction lost a conflict with a concurrent one ("+pe.Message+") and was rolled back")
	case atCommit && (strings.HasPrefix(pe.Code, "23") || strings.HasPrefix(pe.Code, "22") || pe.Code == "P0001"):
		// A deferred constraint or trigger refused the work's writes.
		return fail(store.ErrWorkFailed, idemkit.CodeInternal,
			"COMMIT refused the work's writes ("+pe.Message+"), and they were rolled back")
	}
	return mapError(ctx, op, err)
}

// Rollback implements [store.Work].
func (w *work) Rollback(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.end() // nothing when a Commit ended it already
	if w.tx != nil {
		w.rollback(ctx) // after a failed Commit too: frees the connection
	}
}

// rollback rolls the transaction back, on a connection that may be gone:
// the server rolls back a transaction whose connection closed.
func (w *work) rollback(ctx context.Context) {
	_ = w.tx.Rollback(ctx)
}

// guardedTx is the work's transaction as Tx returns it: Commit and
// Rollback are the guard's.
type guardedTx struct{ pgx.Tx }

func (guardedTx) Commit(context.Context) error   { return ErrGuardCommits }
func (guardedTx) Rollback(context.Context) error { return ErrGuardCommits }

// Step implements [store.StepWork]: fn runs with a context in which [Tx]
// begins the step's own transaction (a *work of the same claim, held like
// the work's for the lease renewals); the step's UPDATE runs in it, fenced
// as [Store.RecordStep]'s, then a durable commit.
func (w *work) Step(ctx context.Context, index int, name string, keep time.Duration, fn func(ctx context.Context) ([]byte, error)) ([]byte, bool, error) {
	const op = "record-step"
	fence := idemkit.Fence(w.id.fence)
	if err := engine.ValidateStep(w.key, fence, index, store.Step{Name: name}, keep); err != nil {
		return nil, false, err
	}
	w.mu.Lock()
	open := w.tx != nil || w.ended
	w.mu.Unlock()
	if open {
		return nil, false, idemkit.NewError(idemkit.CodeInvalidArgument, op,
			"a step cannot run once the guarded work's transaction began or ended: take pgstore.Tx after the work's last step", nil)
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return nil, false, err
	}
	sw := &work{s: w.s, db: w.db, key: w.key, id: w.id}
	ran := false
	defer func() {
		if !ran { // fn panicked: free the step's transaction, then go on
			sw.Rollback(ctx)
		}
	}()
	result, err := fn(context.WithValue(ctx, workKey{}, sw))
	ran = true
	sw.mu.Lock()
	defer sw.mu.Unlock()
	tx := sw.tx
	sw.end()
	step := store.Step{Name: name, Result: result}
	if err == nil {
		err = engine.ValidateStep(w.key, fence, index, step, keep)
	}
	if tx == nil {
		if err != nil {
			return nil, false, err
		}
		ok, err := w.s.RecordStep(ctx, w.key, fence, index, step, keep)
		if !ok || err != nil {
			return nil, false, err
		}
		return result, true, nil
	}
	if err != nil {
		sw.rollback(ctx)
		return nil, false, err
	}
	ok, err := scanOne(tx.QueryRow(ctx, w.s.q.recordStep, w.id.key, w.id.fence, index, encodeStep(step), keep.Microseconds()), nil)
	if err != nil || !ok {
		sw.rollback(ctx)
		if err != nil {
			return nil, false, sw.failed(ctx, op, err, false)
		}
		return nil, false, nil
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, false, sw.failed(ctx, op, err, true)
	}
	return result, true, nil
}
