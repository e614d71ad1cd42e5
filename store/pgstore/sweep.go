package pgstore

import (
	"context"
	"time"

	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/pglock"
)

// DefaultSweepInterval is how often a sweeper started with a non-positive
// interval runs: [lock.DefaultSweepInterval].
const DefaultSweepInterval = lock.DefaultSweepInterval

// Sweep deletes expired records (expires_at <= clock_timestamp()), in
// batches of at most the sweep batch ([WithSweepBatch]) rows, each its own
// short transaction with an asynchronous commit (a lost sweep is only
// repeated), until a batch comes up short ([pglock.SweepBatches]). Rows
// locked by a concurrent Put are skipped. It returns how many rows it
// deleted, also when it fails part way.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	return pglock.SweepBatches(ctx, s.db, s.q.sweep, s.cfg.sweepBatch)
}

// StartSweeper runs [Store.Sweep] every interval (a non-positive one means
// [DefaultSweepInterval]) in a goroutine of its own until ctx ends or stop
// is called; stop waits for a sweep in progress and may be called more than
// once. Each sweep is bounded by the interval. Failures are logged (at warn
// level, without keys) and the sweeper carries on ([lock.SweepEvery]).
//
// Do not start one on a store built on a *pgx.Conn that other goroutines
// use: a connection serves one statement at a time.
func (s *Store) StartSweeper(ctx context.Context, interval time.Duration) (stop func()) {
	return lock.SweepEvery(ctx, interval, s.Sweep, s.cfg.logger, "pgstore: sweeping expired records failed")
}
