package store

import (
	"context"
	"errors"
	"time"

	"github.com/idemkit/idemkit"
)

// Transactor is an optional interface of a [Store] whose records live in
// the same database as the data the guarded work writes, so that the
// work's writes and its outcome can commit in one transaction: if the
// process dies before the commit, neither exists, and a retry runs the
// work again; once the commit is in, both do, and a retry replays.
//
// The guard calls Work for every claim it wins, before the work runs, and
// runs the work with the context it returns; the work's code joins the
// transaction through the backend's own function (pgstore.Tx), which
// begins it on first use. Work that never began it is completed as usual
// ([Store.Complete]).
type Transactor interface {
	// Work returns the unit of work of the claim (key, fence), and ctx
	// carrying it for the work's code. A nil Work means this store cannot
	// (a decorator over a store that is no Transactor): the guard then
	// runs the work with ctx as it is.
	Work(ctx context.Context, key string, fence idemkit.Fence) (context.Context, Work)
}

// Work is the transaction of one claim's holder in a [Transactor]. The
// guard ends work that began with exactly one Commit (the work succeeded
// and its outcome is to be stored) or Rollback (it failed, panicked, lost
// its lease before returning, or asked that nothing be stored); the
// work's own code never commits it.
type Work interface {
	// Begun reports whether the work's code began the transaction.
	Begun() bool
	// Commit writes rec in the transaction, as Complete writes it (only
	// while the record still carries rec.Fence, ending the claim), then
	// commits the transaction: the work's writes and the outcome land
	// together or not at all. It reports false, and rolls the work back,
	// when the record no longer carries the claim (it was taken over: the
	// work's writes are undone). A rec the store refuses (InvalidArgument,
	// [ErrTooLarge]) is refused before anything is sent, and the
	// transaction stays open for another Commit. An error matching
	// [ErrWorkFailed] or [ErrWorkConflict] is the transaction's own
	// failure: it was rolled back, nothing landed and the claim is still
	// this one's. Any other error leaves the commit's fate unknown: either
	// everything landed or nothing did.
	Commit(ctx context.Context, rec Record, ttl time.Duration) (bool, error)
	// Rollback rolls the transaction back; it does nothing to work that
	// never began or has ended.
	Rollback(ctx context.Context)
}

// The failures of the work's own transaction (not the backend's) that
// [Work.Commit] reports: rolled back, nothing landed, the claim is still
// the holder's.
var (
	// ErrWorkFailed is matched by a Commit that failed for good: a
	// statement of the work failed and left the transaction aborted, or a
	// deferred constraint or trigger refused its writes at COMMIT. Running
	// the work again the same way fails the same way.
	ErrWorkFailed = errors.New("store: the work's transaction failed and was rolled back")
	// ErrWorkConflict is matched by a Commit that lost a conflict with
	// concurrent transactions (a serialization failure or a deadlock):
	// running the work again may succeed.
	ErrWorkConflict = errors.New("store: the work's transaction lost a conflict with concurrent transactions and was rolled back")
)
