package mysqlstore

import (
	"context"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store/engine"
)

// Sweep deletes the rows past their keep_until by the server's clock (the
// fence rule of [store.Store], with [WithMaxClockStep]), in batches
// ([WithSweepBatch]) of one DELETE each, oldest first by the keep_until
// index, until a batch comes up short. It returns how many rows it
// deleted, also when it fails part way. Claims take dead rows over in
// place; Sweep removes those of keys never used again.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	const op = "sweep"
	total := 0
	query := s.q.sweepSQL(s.cfg.sweepBatch)
	for {
		if err := idemkit.CheckContext(ctx, op); err != nil {
			return total, err
		}
		var n int64
		err := retry(ctx, op, s.inTx, func(ctx context.Context, _ int) (bool, error) {
			res, err := s.db.ExecContext(ctx, query)
			if err != nil {
				return true, err
			}
			n, err = res.RowsAffected()
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

// StartSweeper runs [Store.Sweep] every interval (non-positive: a minute),
// each sweep bounded by it, in a goroutine of its own until ctx ends or
// stop (which waits for a sweep in progress) is called. Failures are
// logged without keys. One sweeper per database is enough; more are
// harmless; none on a *sql.Conn or *sql.Tx that other goroutines use.
func (s *Store) StartSweeper(ctx context.Context, interval time.Duration) (stop func()) {
	return engine.SweepEvery(ctx, interval, s.Sweep, s.cfg.logger, "mysqlstore: sweeping expired records failed")
}
