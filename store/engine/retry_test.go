package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store/engine"
)

// TestRetry: a failure worth another try is tried again up to the bound,
// one that is not ends the call, and every failure returned went through
// fail.
func TestRetry(t *testing.T) {
	b := idemkit.Backoff{Base: time.Millisecond, Max: time.Millisecond}
	errTry := errors.New("try failed")
	mapped := errors.New("mapped")
	fail := func(err error) error { return errors.Join(mapped, err) }
	for _, c := range []struct {
		name       string
		failures   int // tries that fail before one succeeds
		again      bool
		wantCalls  int
		wantFailed bool
	}{
		{"succeeds at once", 0, true, 1, false},
		{"succeeds on the third try", 2, true, 3, false},
		{"fails past the bound", 10, true, 4, true},
		{"not worth another try", 10, false, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			err := engine.Retry(t.Context(), b, 3, func(_ context.Context, try int) (bool, error) {
				if try != calls {
					t.Fatalf("try %d on call %d", try, calls)
				}
				calls++
				if calls <= c.failures {
					return true, errTry
				}
				return true, nil
			}, func(error, bool) bool { return c.again }, fail)
			if calls != c.wantCalls || (err != nil) != c.wantFailed {
				t.Fatalf("%d calls, %v; want %d calls, failed %v", calls, err, c.wantCalls, c.wantFailed)
			}
			if err != nil && (!errors.Is(err, mapped) || !errors.Is(err, errTry)) {
				t.Fatalf("%v: not the last failure through fail", err)
			}
		})
	}
	t.Run("ended ctx", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		calls := 0
		err := engine.Retry(ctx, idemkit.Backoff{Base: time.Hour, Max: time.Hour}, 3, func(context.Context, int) (bool, error) {
			calls++
			cancel()
			return true, errTry
		}, func(error, bool) bool { return true }, fail)
		if calls != 1 || !errors.Is(err, mapped) {
			t.Fatalf("%d calls, %v; want 1 and the mapped failure", calls, err)
		}
	})
}
