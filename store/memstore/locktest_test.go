package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/lock/locktest"
	"github.com/idemkit/idemkit/store/memstore"
)

// lockEnv is the lock suite's Env over s: memstore keeps one fence floor
// for the whole store, so RaiseFence raises it for every key.
func lockEnv(t *testing.T, s *memstore.Store) *locktest.Env {
	t.Cleanup(func() { _ = s.Close() })
	return &locktest.Env{
		Store:       s,
		SharedFloor: true,
		RaiseFence: func(_ context.Context, _ string, f idemkit.Fence) error {
			memstore.RaiseFence(s, f)
			return nil
		},
		Fence: func(_ context.Context, k string) (idemkit.Fence, error) {
			f, _ := memstore.FenceOf(s, k)
			return f, nil
		},
		Stored: func(_ context.Context, k string) (bool, error) {
			_, ok := memstore.FenceOf(s, k)
			return ok, nil
		},
		Keys:  func(context.Context) ([]string, error) { return memstore.Immortal(s), nil },
		Break: func() { _ = s.Close() },
	}
}

func TestLockConformance(t *testing.T) {
	locktest.Run(t, func(t *testing.T, _ locktest.Config) *locktest.Env {
		clock := fakeclock.New()
		e := lockEnv(t, memstore.New(memstore.WithClock(clock.Now)))
		e.Advance = clock.Advance
		return e
	})
}

func TestLockConformanceRealClock(t *testing.T) {
	locktest.Run(t, func(t *testing.T, _ locktest.Config) *locktest.Env {
		e := lockEnv(t, memstore.New())
		e.Margin = 30 * time.Millisecond
		return e
	})
}
