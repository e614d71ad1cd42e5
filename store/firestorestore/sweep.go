package firestorestore

import (
	"context"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store/engine"
)

// Sweep deletes, for deployments without a TTL policy, the record
// documents whose expireAt has passed and that may go by the rule in
// [store.Store], judged against the read time of the query that found
// them. Each batch ([WithSweepBatch]) is one query in expireAt order,
// after the last document the previous one named (so documents left alone
// hold up nothing), and deletes each document conditioned on the update
// time read, so a record written again since is kept. It returns how many
// documents it deleted, also when it fails part way.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	const op = "sweep"
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return 0, err
	}
	total := 0
	var after *firestore.DocumentSnapshot // the last document the previous batch named
	for {
		q := s.records.Select(fieldState, fieldFence, fieldTTL, fieldLeaseUntil, fieldExpireAt).
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
			if until, ok := keepUntil(snap, s.cfg.step); ok && !snap.ReadTime.Before(until) {
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

// deleteAll deletes snaps, each while its update time is the one read.
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

// StartSweeper runs [Store.Sweep] every interval (see [engine.SweepEvery])
// until ctx ends or stop is called, logging failures on the store's logger
// without keys. A TTL policy on expireAt makes it unnecessary.
func (s *Store) StartSweeper(ctx context.Context, interval time.Duration) (stop func()) {
	return engine.SweepEvery(ctx, interval, s.Sweep, s.cfg.logger, "firestorestore: sweeping expired records failed")
}
