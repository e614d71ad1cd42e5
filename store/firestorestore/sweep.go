package firestorestore

import (
	"context"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
)

// DefaultSweepInterval is how often a sweeper started with a non-positive
// interval runs: [lock.DefaultSweepInterval].
const DefaultSweepInterval = lock.DefaultSweepInterval

// Sweep deletes the record documents whose expireAt (expiresAt +
// [lock.CleanupGrace]) has passed by the client clock, for deployments
// without a TTL policy. It works in batches of at most the sweep batch
// ([WithSweepBatch]) documents: each batch is one read-write transaction
// that queries the expired documents (served by the automatic single-field
// index on expireAt, reading only the expiry fields, never the responses)
// and deletes those still expired by the client clock. The query is part of
// the transaction, so a record written again since it expired is never
// deleted: its Put either commits first (and the query no longer finds
// it) or the two conflict and one is retried. Each query starts after the
// last document the previous one named (in expireAt order), so documents
// that a batch leaves alone (not this store's) never hold up the ones
// behind them. Sweep stops when a batch comes up short, or when its
// transaction meets contention that outlasts the client's retries (the
// documents are in use: the next sweep tries again). It returns how many
// documents it deleted, also when it fails part way.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	const op = "sweep"
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return 0, err
	}
	total := 0
	var last *firestore.DocumentSnapshot // the last document the previous batch's query named
	for {
		n, next, err := s.sweepBatch(ctx, last)
		total += n
		switch {
		case err != nil && status.Code(err) == codes.Aborted && ctx.Err() == nil:
			return total, nil // the documents are in use: the next sweep tries again
		case err != nil:
			return total, firestorelock.MapError(ctx, op, err)
		case next == nil:
			return total, nil
		}
		last = next
		if err := idemkit.CheckContext(ctx, op); err != nil {
			return total, err
		}
	}
}

// sweepBatch deletes, in a transaction, one batch of expired record
// documents, those after the document after (from the start when nil). It
// returns how many it deleted and, when the query filled the batch (more
// may be left), the last document it named.
func (s *Store) sweepBatch(ctx context.Context, after *firestore.DocumentSnapshot) (deleted int, last *firestore.DocumentSnapshot, err error) {
	err = s.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		deleted, last = 0, nil
		now := s.now()
		// The inequality orders the results by expireAt, then by document
		// name; the cursor needs expireAt in the snapshot.
		q := s.records.Where(FieldExpireAt, "<=", now).
			Select(FieldExpiresAt, FieldExpireAt).
			Limit(s.cfg.sweepBatch)
		if after != nil {
			q = q.StartAfter(after)
		}
		snaps, err := tx.Documents(q).GetAll()
		if err != nil {
			return err
		}
		if len(snaps) == s.cfg.sweepBatch {
			last = snaps[len(snaps)-1]
		}
		for _, snap := range snaps {
			// The query judged expireAt; a document whose expiresAt is
			// not a timestamp in the past (not one this store wrote) is
			// left alone.
			expires, ok := snap.Data()[FieldExpiresAt].(time.Time)
			if !ok || lock.Live(expires, now) {
				continue
			}
			if err := tx.Delete(snap.Ref); err != nil {
				return err
			}
			deleted++
		}
		return nil
	}, firestore.MaxAttempts(s.cfg.attempts))
	if err != nil {
		return 0, nil, err
	}
	return deleted, last, nil
}

// StartSweeper runs [Store.Sweep] every interval (a non-positive one means
// [DefaultSweepInterval]) in a goroutine of its own until ctx ends or stop
// is called; stop waits for a sweep in progress and may be called more than
// once. Each sweep is bounded by the interval. Failures are logged on the
// store's logger (at warn level, with their code, never a key) and the
// sweeper carries on ([lock.SweepEvery]). A TTL policy on
// [FieldExpireAt] makes it unnecessary.
func (s *Store) StartSweeper(ctx context.Context, interval time.Duration) (stop func()) {
	return lock.SweepEvery(ctx, interval, s.Sweep, s.cfg.logger, "firestorestore: sweeping expired records failed")
}
