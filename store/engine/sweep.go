package engine

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
)

// DefaultSweepInterval is how often [SweepEvery] runs a sweep when it is
// given a non-positive interval: one minute.
const DefaultSweepInterval = time.Minute

// SweepEvery calls sweep every interval (a non-positive one means
// [DefaultSweepInterval]) in a goroutine of its own until ctx ends or stop
// is called; stop waits for a sweep in progress and may be called more
// than once. The first call comes one interval after the start, and each
// call's ctx is bounded by the interval. When a call fails and ctx has not
// ended, the failure is logged on logger (nil means slog.Default()) at warn
// level with the message msg and the attributes "deleted" (what the call
// reported deleted), "code" (the error's [idemkit.Code]) and "error" (its
// text, which must not hold a key or lock id), and the sweeper carries on;
// a failure after ctx ended is not logged. A nil sweep starts nothing.
//
// It is for engines that delete expired records in batches (the
// PostgreSQL and Firestore stores, and yours): their StartSweeper runs
// their sweep in the background with it.
func SweepEvery(ctx context.Context, interval time.Duration, sweep func(context.Context) (int, error), logger *slog.Logger, msg string) (stop func()) {
	if sweep == nil {
		return func() {}
	}
	if interval <= 0 {
		interval = DefaultSweepInterval
	}
	if logger == nil {
		logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			sctx, scancel := context.WithTimeout(ctx, interval)
			n, err := sweep(sctx)
			scancel()
			if err != nil && ctx.Err() == nil {
				logger.WarnContext(ctx, msg,
					slog.Int("deleted", n), slog.String("code", idemkit.CodeOf(err).String()), slog.String("error", err.Error()))
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
}
