package firestorelock

import (
	"context"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// DefaultSweepInterval is how often a sweeper started with a non-positive
// interval runs: [lock.DefaultSweepInterval].
const DefaultSweepInterval = lock.DefaultSweepInterval

// Sweep deletes the lock documents whose lease expired more than
// [lock.CleanupGrace] ago (their expireAt lies in the past), for
// deployments without a TTL policy on [FieldExpireAt] (see the package
// documentation). It works in batches of at most the sweep batch
// ([WithSweepBatch]) documents: a query on expireAt (served by the
// automatic single-field index) names a batch, and a read-write transaction
// reads those documents again and deletes only the ones still expired by
// the client clock after that read, so a lease acquired or extended in
// between is never deleted. Each query starts after the last document the
// previous one named (in expireAt order), so documents that a batch leaves
// alone (alive again, or not this package's) never hold up the ones behind
// them. It stops when a batch comes up short, or when the transaction
// meets contention that outlasts the client's retries (the documents are
// in use; the next sweep tries again).
//
// Fence counters are never touched (they live in another collection and
// carry no expireAt), so fences keep growing across sweeps. Sweep returns
// how many documents it deleted, also when it fails part way.
func (l *Locker) Sweep(ctx context.Context) (int, error) {
	const op = "sweep"
	total := 0
	var last *firestore.DocumentSnapshot // the last document the previous query named
	for {
		if err := idemkit.CheckContext(ctx, op); err != nil {
			return total, err
		}
		// The inequality orders the results by expireAt, then by document
		// name; the cursor needs expireAt in the snapshot.
		q := l.locks.Where(FieldExpireAt, "<", l.now()).Select(FieldExpireAt).Limit(l.cfg.sweepBatch)
		if last != nil {
			q = q.StartAfter(last)
		}
		snaps, err := q.Documents(ctx).GetAll()
		if err != nil {
			return total, MapError(ctx, op, err)
		}
		if len(snaps) == 0 {
			return total, nil
		}
		last = snaps[len(snaps)-1]
		refs := make([]*firestore.DocumentRef, len(snaps))
		for i, s := range snaps {
			refs[i] = s.Ref
		}
		if l.beforeSweepTx != nil {
			l.beforeSweepTx()
		}
		n, err := l.sweepBatch(ctx, refs)
		total += n
		switch {
		case err != nil && IsContention(err) && ctx.Err() == nil:
			return total, nil
		case err != nil:
			// The transaction reads documents by name and commits deletes:
			// its errors are a commit's (see MapCommitError). A lost answer
			// leaves the batch deleted but uncounted.
			return total, MapCommitError(ctx, op, err)
		case len(snaps) < l.cfg.sweepBatch:
			return total, nil
		}
	}
}

// sweepBatch deletes, in one read-write transaction, those of refs whose
// lease expired more than [lock.CleanupGrace] ago by the clock read after
// the transaction's reads. Documents that are gone, alive again or not
// this package's are left alone. It returns how many it deleted.
func (l *Locker) sweepBatch(ctx context.Context, refs []*firestore.DocumentRef) (int, error) {
	var n int
	err := l.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		n = 0 // the function may run more than once
		snaps, err := tx.GetAll(refs)
		if err != nil {
			return err
		}
		now := l.now()
		var dead []*firestore.DocumentRef
		for _, s := range snaps {
			if !s.Exists() {
				continue
			}
			d, err := decodeLock("sweep", s)
			if err != nil || now.Sub(d.expires) <= lock.CleanupGrace {
				continue
			}
			dead = append(dead, s.Ref)
		}
		for _, ref := range dead {
			if err := tx.Delete(ref); err != nil {
				return err
			}
		}
		n = len(dead)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// StartSweeper runs [Locker.Sweep] every interval (a non-positive one means
// [DefaultSweepInterval]) in a goroutine of its own until ctx ends or stop
// is called; stop waits for a sweep in progress and may be called more than
// once. Each sweep is bounded by the interval. Failures are logged on the
// locker's logger (at warn level, without keys) and the sweeper carries on
// (see [lock.SweepEvery]). A TTL policy on [FieldExpireAt] makes it
// unnecessary.
func (l *Locker) StartSweeper(ctx context.Context, interval time.Duration) (stop func()) {
	return lock.SweepEvery(ctx, interval, l.Sweep, l.cfg.logger, "firestorelock: sweeping expired locks failed")
}
