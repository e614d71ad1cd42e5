package firestorestore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/firestorestore"
	"github.com/idemkit/idemkit/store/storetest"
)

// suiteMaxResponse is the response limit the suites check: above their
// largest responses, below what a record document holds.
const suiteMaxResponse = 1000 << 10

// margin is more than a round trip to the emulator on a busy machine.
const margin = 250 * time.Millisecond

// TestConformance runs the store suite against the emulator, each case on
// a project of its own with a client of its own (Break closes it) whose
// RPCs are counted. Firestore's clock is the only clock, so the suite runs
// on real time. The case that stalls the server gets an emulator of its
// own to freeze.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		host := testenv.Firestore(t).Host
		var stall func() func()
		if strings.Contains(t.Name(), "Stall") {
			e := testenv.NewFirestore(t)
			host, stall = e.Host, func() func() { return e.Stall(t) }
		}
		rc := &rpcCounter{}
		c := dial(t, host, testenv.FirestoreProject(t), intercept(func(method string, _ any, call func() error) error {
			rc.add(method)
			return call()
		})...)
		s := newStore(t, c, firestorestore.WithMaxResponseBytes(suiteMaxResponse))
		return &storetest.Env{
			Store:            s,
			Margin:           margin,
			Break:            func() { _ = c.Close() },
			Stall:            stall,
			MaxResponseBytes: suiteMaxResponse,
			RoundTrips:       rc.total,
			// A claim of a free key and a delete read the document before
			// their conditional write; a take-over is the same read and
			// write.
			MaxRoundTrips: storetest.RoundTripLimits{Claim: 2, TakeOver: 2, Delete: 2},
			Keys: func(ctx context.Context) ([]string, error) {
				return unexpiring(ctx, c, firestorestore.DefaultCollection)
			},
		}
	})
}

// TestConformanceRecords runs the record-store suite (Put, Get, Delete)
// against the emulator.
func TestConformanceRecords(t *testing.T) {
	storetest.RunRecords(t, func(t *testing.T) *storetest.RecordsEnv {
		c := client(t, testenv.FirestoreProject(t))
		s := newStore(t, c, firestorestore.WithMaxResponseBytes(suiteMaxResponse), firestorestore.WithCollection("records"))
		return &storetest.RecordsEnv{
			Records:          s,
			Margin:           margin,
			Break:            func() { _ = c.Close() },
			MaxResponseBytes: suiteMaxResponse,
		}
	})
}
