package engine

import (
	"context"
	"time"

	"github.com/idemkit/idemkit"
)

// Retry runs a statement of an engine: f(ctx, try), try from 0, at most
// retries + 1 times, waiting b.Delay(try + 1) between tries, until ctx
// ends. It returns nil, or the last failure through fail (the engine's
// mapping of native errors). again reports whether a failure is worth
// another try; f reports whether its try may be repeated after an unknown
// outcome (a lost connection), which again weighs.
func Retry(ctx context.Context, b idemkit.Backoff, retries int,
	f func(ctx context.Context, try int) (repeatable bool, err error),
	again func(err error, repeatable bool) bool,
	fail func(error) error,
) error {
	for try := 0; ; try++ {
		repeatable, err := f(ctx, try)
		if err == nil {
			return nil
		}
		if try == retries || ctx.Err() != nil || !again(err, repeatable) {
			return fail(err)
		}
		t := time.NewTimer(b.Delay(try + 1))
		select {
		case <-ctx.Done():
			t.Stop()
			return fail(err)
		case <-t.C:
		}
	}
}
