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

var _ store.Transactor = (*Store)(nil)

// ErrNoTransaction is what [Tx] returns for a context that is not the
// context of guarded work on a [Store] that can begin transactions: work
// not run by the guard, a guard on another store, or a store whose [DB] is
// itself a transaction or cannot begin one.
var ErrNoTransaction = errors.New("pgstore: no transaction: the context is not that of work guarded by a pgstore.Store over a pool or a connection")

// ErrGuardCommits is what the transaction [Tx] returns answers to Commit
// and Rollback: the guard ends it, with the outcome (return normally) or
// without (return an error, or panic).
var ErrGuardCommits = errors.New("pgstore: the guard commits or rolls back this transaction: return from the work instead")

// beginner is what a [DB] needs to begin transactions: *pgxpool.Pool and
// *pgx.Conn have it.
type beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Tx returns the transaction of the guarded work whose context is ctx,
// beginning it (on a connection of the store's pool, held until the work's
// end) on the first call; later calls return the same transaction.
//
// The guard commits it together with the work's outcome: the record is
// completed in the transaction, under the claim's fence, and then the
// transaction commits, so the work's writes and its record land together
// or not at all. A crash before the commit leaves neither (the retry runs
// the work again, on a database without its writes); once the commit is
// in, the retry replays. If the claim was taken over while the work ran
// (its lease ran out and another request claimed the key), the record no
// longer carries the claim: the transaction is rolled back and the call
// fails (middleware.UnavailableError, wrapping idemkit.ErrLeaseLost), so the
// work's writes are never there twice. A lease lost before the work
// returned (its ctx ended with idemkit.ErrLeaseLost: the renewals failed
// until it ran out) fails the call the same way and releases the claim,
// even when nobody claimed the key meanwhile. An error, a panic, a
// verdict that stores nothing (an HTTP 5xx, say) or
// middleware.DoNotRecord roll it back, and the claim is released.
//
// What it cannot cover: effects outside this database (e-mails, calls to
// other services) happen when the work makes them, committed or not; give
// them the claim's fence (middleware.CallInfoFrom) or write them to an
// outbox table in this transaction. The work's tables must be in the same
// database as the records.
//
// The returned transaction refuses Commit and Rollback ([ErrGuardCommits]);
// savepoints (its Begin) work as usual. Its isolation level is
// [WithTxIsolation]'s (read committed by default). A transaction that
// fails by itself (a statement the work let fail leaves it aborted; a
// deferred constraint refuses it at COMMIT; a serialization failure) fails
// the call with an error matching store.ErrWorkFailed or
// store.ErrWorkConflict, and its claim is released. Its row
// locks are held until the guard ends it: after a takeover, the taker's
// insert of a value a unique constraint holds, which the first holder
// inserted, blocks until the first holder's transaction ends (rolled
// back), then goes on (see the package docs).
// ErrNoTransaction is returned when ctx is not guarded work on such a
// store; a failure to begin is a coded error (Unavailable when the server
// cannot be reached).
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
	w := &work{s: s, db: b, id: workID{storedKey(key), int64(fence)}}
	return context.WithValue(ctx, workKey{}, w), w
}

// workID names a claim: its stored key and fence.
type workID struct {
	key   string
	fence int64
}

// work is one claim's transaction: begun by Tx, ended by the guard.
type work struct {
	s  *Store
	db beginner
	id workID

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
		// Mark the claim as waited for before the transaction's snapshot
		// (see Store.Watch): a waiting duplicate's mark would be a change
		// of the record's row after it, which the completion could then
		// not write (a serialization failure). Marked, the claim's row is
		// only read by duplicates.
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

// Commit implements [store.Work]: the completion's UPDATE (guarded by the
// fence and the claimed state) in the transaction, then its commit, which
// is durable. No row updated: the claim is no longer this one's, and the
// transaction is rolled back.
func (w *work) Commit(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "commit"
	if err := engine.ValidateComplete(rec, ttl); err != nil {
		return false, err
	}
	if err := checkFence(op, rec.Fence); err != nil {
		return false, err
	}
	if len(rec.Response) > w.s.cfg.maxResponse {
		return false, engine.TooLarge(op, len(rec.Response), w.s.cfg.maxResponse)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tx == nil || w.ended {
		return false, idemkit.NewError(idemkit.CodeInvalidArgument, op, "no transaction under way", nil)
	}
	w.end()
	response := rec.Response
	if response == nil {
		response = []byte{}
	}
	var done bool
	err := w.tx.QueryRow(ctx, w.s.q.complete, storedKey(rec.Key), int64(rec.Fence), int16(rec.State),
		response, []byte(rec.Fingerprint), ttl.Microseconds()).Scan(&done)
	if errors.Is(err, pgx.ErrNoRows) {
		w.rollback(ctx)
		return false, nil
	}
	if err != nil {
		w.rollback(ctx)
		return false, w.failed(ctx, op, err, false)
	}
	if err := w.tx.Commit(ctx); err != nil {
		return false, w.failed(ctx, op, err, true)
	}
	return true, nil
}

// failed maps the error of the completion's statement in the transaction
// (atCommit false) or of its COMMIT. A failure of the transaction itself
// (the server answered, and rolled it back) wraps [store.ErrWorkFailed] or
// [store.ErrWorkConflict] with a detail that names its cause; anything
// else is the backend's (see [mapError]).
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
