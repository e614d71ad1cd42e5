package pglock

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// DefaultSweepInterval is how often a sweeper started with a non-positive
// interval runs: [lock.DefaultSweepInterval].
const DefaultSweepInterval = lock.DefaultSweepInterval

// Sweep deletes lock rows that expired more than [lock.CleanupGrace] ago,
// in batches of at most the sweep batch ([WithSweepBatch]) rows, each its
// own short transaction with an asynchronous commit, until a batch comes up
// short (see [SweepBatches]). Rows locked by a concurrent operation are
// skipped. Fence counters are never touched, so fences keep growing across
// sweeps. It returns how many rows it deleted, also when it fails part way.
func (l *Locker) Sweep(ctx context.Context) (int, error) {
	return SweepBatches(ctx, l.db, l.q.sweep, l.cfg.sweepBatch)
}

// StartSweeper runs [Locker.Sweep] every interval (a non-positive one means
// [DefaultSweepInterval]) in a goroutine of its own until ctx ends or stop
// is called; stop waits for a sweep in progress and may be called more than
// once. Each sweep is bounded by the interval. Failures are logged (at warn
// level, without keys) and the sweeper carries on (see [lock.SweepEvery]).
//
// Do not start one on a locker built on a *pgx.Conn that other goroutines
// use: a connection serves one statement at a time.
func (l *Locker) StartSweeper(ctx context.Context, interval time.Duration) (stop func()) {
	return lock.SweepEvery(ctx, interval, l.Sweep, l.cfg.logger, "pglock: sweeping expired locks failed")
}

// SweepBatches runs sql, a DELETE of at most $1 rows (its only parameter),
// with $1 set to batch, again and again until a run deletes fewer than
// batch rows, and returns how many rows the runs deleted, also when one
// fails part way. Each run is one statement, retried by [Retry] as a
// repeatable try (op "sweep"), so in its own implicit transaction unless db
// is a pgx.Tx (it is then tried once); ctx is checked before each. A batch
// below 1 is refused with InvalidArgument.
//
// Keep the DELETE short and harmless to repeat: pick the batch's rows in a
// subquery with ORDER BY, LIMIT $1 and FOR UPDATE SKIP LOCKED, so that a
// run never waits for a row that an operation holds, and let it commit
// asynchronously (a lost sweep is only repeated).
//
// [Locker.Sweep] runs through it. It is exported as a building block for a
// store that keeps its rows next to the locker's (pgstore's Sweep runs
// through it).
func SweepBatches(ctx context.Context, db DB, sql string, batch int) (int, error) {
	const op = "sweep"
	if batch < 1 {
		return 0, idemkit.NewError(idemkit.CodeInvalidArgument, op, "the sweep batch must be at least 1", nil)
	}
	_, inTx := db.(pgx.Tx)
	total := 0
	for {
		if err := idemkit.CheckContext(ctx, op); err != nil {
			return total, err
		}
		var n int64
		err := Retry(ctx, op, inTx, func(ctx context.Context) (bool, error) {
			tag, err := db.Exec(ctx, sql, batch)
			n = tag.RowsAffected()
			return true, err
		})
		total += int(n)
		if err != nil {
			return total, err
		}
		if n < int64(batch) {
			return total, nil
		}
	}
}
