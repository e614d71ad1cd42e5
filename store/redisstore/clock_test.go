package redisstore_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/storetest"
)

// TestConformanceClock runs the conformance suite's clock case on a single
// node of its own whose clock the case steps back.
func TestConformanceClock(t *testing.T) {
	storetest.RunClock(t, func(t *testing.T) *storetest.Env {
		clock := testenv.NewClock(t)
		srv := testenv.NewRedisWithClock(t, clock)
		e := conformanceEnv(t, nodeClient(t, srv.Addr), nodeClient(t, srv.Addr))
		e.ShiftClock = func(_ *testing.T, d time.Duration) { clock.Step(d) }
		return e
	})
}
