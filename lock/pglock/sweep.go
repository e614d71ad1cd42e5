package pglock

import (
	"context"
	"time"

	"github.com/idemkit/idemkit/store"

	"github.com/idemkit/idemkit"
)

// Sweep deletes the rows that may go: those whose expiry (a lease's end, a
// tombstone's fence) passed more than [lock.CleanupGrace] ago and whose
// fence the server clock has passed, read as Unix milliseconds, so that the
// next fence of their keys is still greater. It works in batches of at most
// the sweep batch ([WithSweepBatch]) rows, each its own short transaction
// with an asynchronous commit (inside a caller's pgx.Tx: part of it), until
// a batch comes up short. Rows locked by a concurrent operation, or whose
// key an acquire is taking, are skipped. It returns how many rows it deleted, also when it fails part
// way.
func (l *Locker) Sweep(ctx context.Context) (int, error) {
	const op = "sweep"
	total := 0
	for {
		if err := idemkit.CheckContext(ctx, op); err != nil {
			return total, err
		}
		var n int64
		err := retry(ctx, op, l.inTx, func(ctx context.Context) (bool, error) {
			// Repeatable: a batch deleted twice deletes nothing more.
			tag, err := l.db.Exec(ctx, l.q.sweep, l.cfg.sweepBatch)
			n = tag.RowsAffected()
			return true, err
		})
		total += int(n)
		if err != nil || n < int64(l.cfg.sweepBatch) {
			return total, err
		}
	}
}

// StartSweeper runs [Locker.Sweep] every interval (a non-positive one means
// one minute) in a goroutine of its own until ctx ends or stop is called;
// stop waits for a sweep in progress and may be called more than once.
// Each sweep is bounded by the interval. Failures are logged (at warn
// level, without keys) and the sweeper carries on.
//
// Do not start one on a locker built on a *pgx.Conn that other goroutines
// use: a connection serves one statement at a time.
func (l *Locker) StartSweeper(ctx context.Context, interval time.Duration) (stop func()) {
	return store.SweepEvery(ctx, interval, l.Sweep, l.cfg.logger, "pglock: sweeping expired locks failed")
}
