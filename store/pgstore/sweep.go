package pgstore

import (
	"context"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// Sweep deletes the rows past their keep_until by the server's clock: the
// time [store.Store]'s fence rule lets them go, with the store's largest
// clock step ([WithMaxClockStep]). It runs in batches ([WithSweepBatch]),
// each one statement with an asynchronous commit (a lost sweep is only
// repeated), skipping locked rows, until a batch comes up short, and
// returns how many rows it deleted, also when it fails part way. Claims
// take dead rows over in place; Sweep removes those of keys never used
// again.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	const op = "sweep"
	total := 0
	for {
		if err := idemkit.CheckContext(ctx, op); err != nil {
			return total, err
		}
		var n int64
		err := retry(ctx, op, s.inTx, func(ctx context.Context, _ int) (bool, error) {
			tag, err := s.db.Exec(ctx, s.q.sweep, s.cfg.sweepBatch)
			n = tag.RowsAffected()
			return true, err
		})
		total += int(n)
		if err != nil {
			return total, err
		}
		if n < int64(s.cfg.sweepBatch) {
			return total, nil
		}
	}
}

// StartSweeper runs [Store.Sweep] every interval (a non-positive one means
// one minute) in a goroutine of its own until ctx ends or stop is called;
// stop waits for a sweep in progress and may be called more than once. Each
// sweep is bounded by the interval. Failures are logged (at warn level,
// without keys) and the sweeper carries on.
//
// Do not start one on a store built on a *pgx.Conn that other goroutines
// use: a connection serves one statement at a time. One sweeper per
// database is enough; more are harmless.
func (s *Store) StartSweeper(ctx context.Context, interval time.Duration) (stop func()) {
	return store.SweepEvery(ctx, interval, s.Sweep, s.cfg.logger, "pgstore: sweeping expired records failed")
}
