package dynamostore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/dynamostore"
	"github.com/idemkit/idemkit/store/storetest"
)

// suiteMaxResponse is the response limit the suites check: above their
// largest responses that fit an item, below what an item holds.
const suiteMaxResponse = 300 << 10

// margin is more than a round trip to dynalite on a busy machine.
const margin = 250 * time.Millisecond

// TestConformance runs the store suite against dynalite, each case on a
// table of its own with a client of its own (Break cuts it off) whose
// requests are counted. The store's clock is the client's, so the suite
// moves it (Advance, ShiftClock) rather than sleeping; the skew margin is
// 0, since the suite checks leases at their exact boundaries. The case
// that stalls the server gets a dynalite of its own to freeze.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env { return conformanceEnv(t) })
}

// TestConformanceClock runs the suite's clock case: fences keep growing
// when the clients' clock steps back.
func TestConformanceClock(t *testing.T) {
	storetest.RunClock(t, func(t *testing.T) *storetest.Env { return conformanceEnv(t) })
}

func conformanceEnv(t *testing.T) *storetest.Env {
	url := testenv.Dynamo(t).URL
	var stall func() func()
	if strings.Contains(t.Name(), "Stall") {
		srv := testenv.NewDynamo(t)
		url, stall = srv.URL, func() func() { return srv.Stall(t) }
	}
	client, c := newClient(t, url)
	opt, table := newTable(t, client)
	clk := newClock()
	s := newStore(t, client, opt, dynamostore.WithMaxResponseBytes(suiteMaxResponse),
		dynamostore.WithMaxClockSkew(0), dynamostore.WithClock(clk.Now))
	return &storetest.Env{
		Store:            s,
		Advance:          clk.advance,
		ShiftClock:       func(_ *testing.T, d time.Duration) { clk.advance(d) },
		Break:            c.Break,
		Stall:            stall,
		MaxResponseBytes: suiteMaxResponse,
		RoundTrips:       c.RoundTrips,
		// dynalite sends no item back with a refused condition, so a
		// replay and a busy claim read it after the refused write (one
		// round trip on DynamoDB).
		MaxRoundTrips: storetest.RoundTripLimits{Busy: 2, Replay: 2},
		Keys:          immortal(client, table),
	}
}

// TestConformanceRecords runs the record-store suite (Put, Get, Delete)
// against dynalite.
func TestConformanceRecords(t *testing.T) {
	storetest.RunRecords(t, func(t *testing.T) *storetest.RecordsEnv {
		client, c := newClient(t, testenv.Dynamo(t).URL)
		opt, _ := newTable(t, client)
		s := newStore(t, client, opt, dynamostore.WithMaxResponseBytes(suiteMaxResponse))
		return &storetest.RecordsEnv{Records: s, Margin: margin, Break: c.Break, MaxResponseBytes: suiteMaxResponse}
	})
}
