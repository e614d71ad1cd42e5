package firestorestore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
	"github.com/idemkit/idemkit/store/storetest"
)

// TestSealedRecordsOnFirestore runs the sealed-record scenario on the
// emulator, reading the record's document back: every field, bytes as
// they are and other values as they print.
func TestSealedRecordsOnFirestore(t *testing.T) {
	t.Parallel()
	project := testenv.FirestoreProject(t)
	guardtest.Sealed(t,
		func(t *testing.T) store.Store {
			return newStore(t, client(t, project), firestorestore.WithLogger(discard()))
		},
		func(t *testing.T, recordKey string) []guardtest.Field {
			snap, err := client(t, project).Collection(firestorestore.DefaultCollection).Doc(firestorestore.DocID(recordKey)).Get(t.Context())
			if err != nil {
				t.Fatalf("reading the record's document: %v", err)
			}
			var fields []guardtest.Field
			for name, value := range snap.Data() {
				b, ok := value.([]byte)
				if !ok {
					b = []byte(fmt.Sprint(value))
				}
				fields = append(fields, guardtest.Field{Name: name, Value: b})
			}
			return fields
		})
}

// TestSealedConformance runs the store suite on a sealed store on the
// shared emulator, each case on a project of its own: sealing keeps the
// contract and adds no RPC. The response limit is the store's, less the
// envelope.
func TestSealedConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		rc := &rpcCounter{}
		c := client(t, testenv.FirestoreProject(t), intercept(func(method string, _ any, call func() error) error {
			rc.add(method)
			return call()
		})...)
		current, retired := guardtest.SealKeys()
		s, err := store.Seal(newStore(t, c, firestorestore.WithMaxResponseBytes(suiteMaxResponse)), retired, current)
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.Env{
			Store:            s,
			Margin:           margin,
			Break:            func() { _ = c.Close() },
			MaxResponseBytes: suiteMaxResponse - guardtest.SealOverhead(retired),
			RoundTrips:       rc.total,
			MaxRoundTrips:    storetest.RoundTripLimits{Claim: 2, TakeOver: 2, Delete: 2},
			Keys: func(ctx context.Context) ([]string, error) {
				return unexpiring(ctx, c, firestorestore.DefaultCollection)
			},
		}
	})
}
