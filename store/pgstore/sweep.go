package pgstore

import (
	"context"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store/engine"
)

// Sweep deletes the rows past their keep_until (by the server's clock):
// outcomes past their expiry, claims a minute ([store.ClaimRetention]) past
// their lease, tombstones of released claims and deleted records a minute
// after they were left; none before the server's clock has passed its
// fence. It runs in batches of at most the sweep batch ([WithSweepBatch])
// rows, each one statement in its own short transaction with an
// asynchronous commit (a lost sweep is only repeated), until a batch comes
// up short. Rows locked by a concurrent operation are skipped. It returns
// how many rows it deleted, also when it fails part way.
//
// Claims also take over, in place, any row that is no longer live, so a
// key that is used again never waits for a sweep; Sweep is what keeps keys
// that are never used again from piling up.
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
	return engine.SweepEvery(ctx, interval, s.Sweep, s.cfg.logger, "pgstore: sweeping expired records failed")
}
