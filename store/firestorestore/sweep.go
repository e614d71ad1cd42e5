package firestorestore

import (
	"context"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
// it) or the two conflict and one is retried. Sweep stops when a batch
// comes up short or deletes nothing, or when its transaction meets
// contention that outlasts the client's retries (the documents are in use:
// the next sweep tries again). It returns how many documents it deleted,
// also when it fails part way.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	const op = "sweep"
	if err := lock.CheckContext(ctx, op); err != nil {
		return 0, err
	}
	total := 0
	for {
		n, full, err := s.sweepBatch(ctx)
		total += n
		switch {
		case err != nil && status.Code(err) == codes.Aborted && ctx.Err() == nil:
			return total, nil // the documents are in use: the next sweep tries again
		case err != nil:
			return total, firestorelock.MapError(ctx, op, err)
		case !full || n == 0:
			return total, nil
		}
		if err := lock.CheckContext(ctx, op); err != nil {
			return total, err
		}
	}
}

// sweepBatch deletes one batch of expired record documents in a
// transaction. It returns how many it deleted and whether the query filled
// the batch (more may be left).
func (s *Store) sweepBatch(ctx context.Context) (deleted int, full bool, err error) {
	err = s.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		deleted, full = 0, false
		now := s.now()
		q := s.records.Where(FieldExpireAt, "<=", now).
			Select(FieldExpiresAt, FieldExpireAt).
			Limit(s.cfg.sweepBatch)
		snaps, err := tx.Documents(q).GetAll()
		if err != nil {
			return err
		}
		full = len(snaps) == s.cfg.sweepBatch
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
		return 0, false, err
	}
	return deleted, full, nil
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
