package firestorestore

import (
	"context"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store/engine"
)

// Sweep deletes the record documents that may go, for deployments without a
// TTL policy: those whose expireAt has passed by Firestore's clock and
// whose record is past its expiry ([store.ClaimRetention] past the lease
// for a claim) and past its fence read as Unix milliseconds, both judged
// against the read time of the query that found them. It works in batches
// of at most the sweep batch ([WithSweepBatch]): each batch is one query in
// expireAt order (served by the automatic single-field index on expireAt,
// reading only the fields it judges, never the responses) and deletes
// through a [firestore.BulkWriter], each conditioned on the update time the
// query read, so a record written again since it was read is never deleted.
// Each query starts after the last document the previous one named, so
// documents a batch leaves alone (not this store's) never hold up the ones
// behind them. Sweep stops at the first document whose expireAt is still
// ahead. It returns how many documents it deleted, also when it fails part
// way.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	const op = "sweep"
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return 0, err
	}
	total := 0
	var after *firestore.DocumentSnapshot // the last document the previous batch named
	for {
		q := s.records.Select(fieldState, fieldFence, fieldTTL, fieldExpireAt).
			OrderBy(fieldExpireAt, firestore.Asc).Limit(s.cfg.sweepBatch)
		if after != nil {
			q = q.StartAfter(after)
		}
		snaps, err := q.Documents(ctx).GetAll()
		if err != nil {
			return total, mapError(ctx, op, err)
		}
		more := len(snaps) == s.cfg.sweepBatch
		var gone []*firestore.DocumentSnapshot
		for _, snap := range snaps {
			m := snap.Data()
			if at, ok := m[fieldExpireAt].(time.Time); ok && snap.ReadTime.Before(at) {
				more = false // the rest of the order expires later still
				break
			}
			if until, ok := keepUntil(snap); ok && !snap.ReadTime.Before(until) {
				gone = append(gone, snap)
			}
		}
		n, err := s.deleteAll(ctx, gone)
		total += n
		if err != nil {
			return total, mapError(ctx, op, err)
		}
		if !more {
			return total, nil
		}
		after = snaps[len(snaps)-1]
	}
}

// deleteAll deletes the documents snaps, each only if its update time is
// still the one read, and returns how many it deleted. A document that
// changed or went away since is not an error.
func (s *Store) deleteAll(ctx context.Context, snaps []*firestore.DocumentSnapshot) (int, error) {
	if len(snaps) == 0 {
		return 0, nil
	}
	bw := s.client.BulkWriter(ctx)
	jobs := make([]*firestore.BulkWriterJob, 0, len(snaps))
	var firstErr error
	for _, snap := range snaps {
		j, err := bw.Delete(snap.Ref, firestore.LastUpdateTime(snap.UpdateTime))
		if err != nil {
			firstErr = err
			break
		}
		jobs = append(jobs, j)
	}
	bw.End()
	n := 0
	for _, j := range jobs {
		_, err := j.Results()
		switch {
		case err == nil:
			n++
		case contended(err):
		case firstErr == nil:
			firstErr = err
		}
	}
	return n, firstErr
}

// StartSweeper runs [Store.Sweep] every interval (a non-positive one means
// one minute) in a goroutine of its own until ctx ends or stop
// is called; stop waits for a sweep in progress and may be called more than
// once. Each sweep is bounded by the interval. Failures are logged on the
// store's logger ([WithLogger]) at warn level with their code, never a
// key, and the sweeper carries on. A TTL policy on the expireAt field
// makes it unnecessary (see the package documentation).
func (s *Store) StartSweeper(ctx context.Context, interval time.Duration) (stop func()) {
	return engine.SweepEvery(ctx, interval, s.Sweep, s.cfg.logger, "firestorestore: sweeping expired records failed")
}
