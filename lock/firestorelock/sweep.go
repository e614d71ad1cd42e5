package firestorelock

import (
	"context"
	"time"

	"github.com/idemkit/idemkit/store"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit"
)

// Sweep collects the lock documents whose expireAt has passed, for
// deployments without a TTL policy on expireAt (see the package
// documentation): leases expired more than [lock.CleanupGrace] ago, and
// tombstones whose fence the server clock has passed. It works in batches
// of at most the sweep batch ([WithSweepBatch]) documents: a query in
// expireAt order (served by the automatic single-field index) names a
// batch of documents whose expireAt lies before the query's read time, and
// a read-write transaction reads them again and, judging each by that
// read's time, deletes it, or reduces an expired lease to its tombstone
// while the server clock has not passed its fence. A lease acquired or
// extended in between is never touched. Each query starts after the last
// document the previous one named, so documents that a batch leaves alone
// (alive again, or not this package's) never hold up the ones behind them.
// It stops at the first document not yet due, when a batch comes up short,
// or when the transaction meets contention that outlasts the client's
// retries (the documents are in use; the next sweep tries again).
//
// Sweep returns how many documents it collected, also when it fails part
// way.
func (l *Locker) Sweep(ctx context.Context) (int, error) {
	const op = "sweep"
	total := 0
	var last *firestore.DocumentSnapshot // the last document the previous query named
	for {
		if err := idemkit.CheckContext(ctx, op); err != nil {
			return total, err
		}
		q := l.locks.OrderBy(fieldExpireAt, firestore.Asc).Select(fieldExpireAt).Limit(l.cfg.sweepBatch)
		if last != nil {
			q = q.StartAfter(last)
		}
		snaps, err := q.Documents(ctx).GetAll()
		if err != nil {
			return total, mapError(ctx, op, err)
		}
		if len(snaps) == 0 {
			return total, nil
		}
		last = snaps[len(snaps)-1]
		done := len(snaps) < l.cfg.sweepBatch
		var due []*firestore.DocumentRef
		for _, s := range snaps {
			at, ok := s.Data()[fieldExpireAt].(time.Time)
			if !ok {
				continue // not this package's: numbers sort before timestamps
			}
			if s.ReadTime.Before(at) {
				done = true // the rest of the collection is not due either
				break
			}
			due = append(due, s.Ref)
		}
		if len(due) > 0 {
			if l.beforeSweepTx != nil {
				l.beforeSweepTx()
			}
			n, err := l.sweepBatch(ctx, due)
			total += n
			switch {
			case err != nil && isContention(err) && ctx.Err() == nil:
				return total, nil
			case err != nil:
				// The transaction reads documents by name and commits
				// deletes: its errors are a commit's. A lost answer leaves
				// the batch collected but uncounted.
				return total, mapCommitError(ctx, op, err)
			}
		}
		if done {
			return total, nil
		}
	}
}

// sweepBatch collects, in one read-write transaction, those of refs that
// [verdict] allows at the time of the transaction's read. Documents that
// are gone, alive again or not this package's are left alone. It returns
// how many it collected.
func (l *Locker) sweepBatch(ctx context.Context, refs []*firestore.DocumentRef) (int, error) {
	var n int
	err := l.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		n = 0 // the function may run more than once
		snaps, err := tx.GetAll(refs)
		if err != nil {
			return err
		}
		for _, s := range snaps {
			if !s.Exists() {
				continue
			}
			d, err := decode("sweep", s)
			if err != nil {
				continue
			}
			switch verdict(d, s.ReadTime) {
			case remove:
				err = tx.Delete(s.Ref)
			case bury:
				err = tx.Set(s.Ref, tombstoneData(d.key, d.fence))
			default:
				continue
			}
			if err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// StartSweeper runs [Locker.Sweep] every interval (a non-positive one means
// [store.DefaultSweepInterval], one minute) in a goroutine of its own until
// ctx ends or stop is called; stop waits for a sweep in progress and may
// be called more than once. Each sweep is bounded by the interval.
// Failures are logged on the locker's logger (at warn level, without keys)
// and the sweeper carries on (see [store.SweepEvery]). A TTL policy on
// expireAt makes it unnecessary.
func (l *Locker) StartSweeper(ctx context.Context, interval time.Duration) (stop func()) {
	return store.SweepEvery(ctx, interval, l.Sweep, l.cfg.logger, "firestorelock: sweeping expired locks failed")
}
