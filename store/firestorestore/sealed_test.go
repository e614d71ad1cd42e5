package firestorestore_test

import (
	"context"
	"fmt"
	"testing"

	"cloud.google.com/go/firestore"

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

// TestSealedRecordsTamperedOnFirestore changes sealed records' fields
// straight in their documents: no change makes a retry run the work again
// or replay anything but the authentic outcome. A record's expiry is its
// document's update time plus its lifetime field, so moving it into the
// past sets that lifetime to 1 µs.
func TestSealedRecordsTamperedOnFirestore(t *testing.T) {
	t.Parallel()
	project := testenv.FirestoreProject(t)
	c := client(t, project)
	guardtest.SealedTampering(t,
		func(t *testing.T) store.Store {
			return newStore(t, client(t, project), firestorestore.WithLogger(discard()))
		},
		func(t *testing.T, recordKey string, change guardtest.Tampering) {
			ctx := t.Context()
			ref := c.Collection(firestorestore.DefaultCollection).Doc(firestorestore.DocID(recordKey))
			var updates []firestore.Update
			if change.State != 0 {
				updates = append(updates, firestore.Update{Path: "state", Value: int64(change.State)})
			}
			if change.Tombstone {
				updates = append(updates, firestore.Update{Path: "state", Value: int64(0)})
			}
			if change.Expired {
				updates = append(updates, firestore.Update{Path: "ttlMicros", Value: int64(1)})
			}
			if change.Fence != 0 {
				snap, err := ref.Get(ctx)
				if err != nil {
					t.Fatal(err)
				}
				fence, ok := snap.Data()["fence"].(int64)
				if !ok {
					t.Fatalf("the record's fence is %v", snap.Data()["fence"])
				}
				updates = append(updates, firestore.Update{Path: "fence", Value: fence + change.Fence})
			}
			if change.Fingerprint != "" {
				updates = append(updates, firestore.Update{Path: "fingerprint", Value: change.Fingerprint})
			}
			if _, err := ref.Update(ctx, updates); err != nil {
				t.Fatal(err)
			}
		})
}
