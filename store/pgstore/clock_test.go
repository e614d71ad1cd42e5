package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/storetest"
)

// TestConformanceClock runs the conformance suite's clock case on a server
// of its own whose clock the case steps back, sweeping where a sweeper
// would.
func TestConformanceClock(t *testing.T) {
	storetest.RunClock(t, func(t *testing.T) *storetest.Env {
		clock := testenv.NewClock(t)
		srv := testenv.NewPostgresWithClock(t, clock)
		admin := newPool(t, srv.URL, 2)
		opt := table(t, admin)
		pool := newPool(t, srv.URL, 8)
		s, err := New(pool, opt)
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.Env{
			Store: s, Margin: margin, Break: pool.Close,
			ShiftClock: func(_ *testing.T, d time.Duration) { clock.Step(d) },
			Sweep: func(ctx context.Context) error {
				_, err := s.Sweep(ctx)
				return err
			},
		}
	})
}
