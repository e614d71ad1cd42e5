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

// StepWork is an optional interface of a [Work] of a store that is also a
// [Stepper]: a step of the work may write in a transaction of its own
// that commits with the step's recovery point, so that each step lands
// whole (its writes and its record) or not at all, and a retry resumes
// after the last step that landed.
type StepWork interface {
	// Step runs fn as step number index (from 0) of the work's claim,
	// named name, and records what fn returned as that step. fn's ctx
	// carries a transaction of the step's own, which the work's code joins
	// as it joins the work's (pgstore.Tx), begun on its first use. When fn
	// succeeds, Step writes the step in that transaction as
	// [Stepper.RecordStep] writes it (only while the record still carries
	// the claim and exactly index steps; kept at least keep from now), then
	// commits: fn's writes and the step land together or not at all. fn
	// that never began the transaction has its step recorded as RecordStep
	// records it. Step returns fn's result and true once the step landed.
	//
	// It reports false, with nothing landed, when the record no longer
	// carries the claim or already has a step at index (the claim was
	// lost; fn's writes are rolled back). fn's error rolls the
	// transaction back and is returned unchanged; so is a panic of fn,
	// which goes on after the rollback. An error matching [ErrWorkFailed]
	// or [ErrWorkConflict] is the step transaction's own failure: rolled
	// back, nothing landed, the claim is still the holder's. A name or
	// index or keep [Stepper.RecordStep] would refuse is refused
	// (InvalidArgument) before fn runs, as is a step while the work's own
	// transaction is open or has ended (the work begins it after its
	// last step); a result that makes the step too large (InvalidArgument,
	// [ErrTooLarge]) after fn ran, rolling fn's writes back. Any other
	// error leaves the step's fate unknown: either it landed with fn's
	// writes or nothing did.
	Step(ctx context.Context, index int, name string, keep time.Duration, fn func(ctx context.Context) ([]byte, error)) (result []byte, ok bool, err error)
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
