package firestorestore_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/firestorelock"
	"github.com/idemkit/idemkit/lock/firestorelock/firestoretest"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// TestKeyKinds writes, reads and deletes a record under each kind of key
// Firestore cannot take as a document id verbatim (or could misread as a
// path), each in a collection of its own, and checks the document lands
// in that collection itself (never a sub-collection) under the id DocID
// derives.
func TestKeyKinds(t *testing.T) {
	t.Parallel()
	c := firestoretest.Client(t, testenv.FirestoreProject(t))
	ctx := t.Context()
	for i, tc := range []struct {
		name, key string
	}{
		{"slash", "/"},
		{"path", "tenant/orders/42"},
		{"trailing slash", "orders/"},
		{"dot", "."},
		{"dot dot", ".."},
		{"reserved form", "__x__"},
		{"reserved form with dots", "__.*__"},
		{"longest", strings.Repeat("k", store.MaxKeyBytes)},
		{"longest with slashes", strings.Repeat("a/", store.MaxKeyBytes/2)},
		{"unicode composed", "caf\u00e9 \U0001F512"},
		{"unicode decomposed", "cafe\u0301"},
		{"invalid utf-8", "\xff\xfe/\x00"},
		{"control characters", "a\x00b\n\t"},
		{"spaces", "  "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			coll := fmt.Sprint("records_", i)
			s := newStore(t, c, firestorestore.WithCollection(coll))
			rec := store.Record{Key: tc.key, Fingerprint: "fp-" + tc.name, State: store.StateCompleted, Response: []byte(tc.name), Fence: 3}
			if ok, err := s.Put(ctx, rec, time.Hour); err != nil || !ok {
				t.Fatalf("Put: %v, %v", ok, err)
			}
			got, ok, err := s.Get(ctx, tc.key)
			if err != nil || !ok || got.Key != tc.key || string(got.Response) != tc.name || got.Fence != 3 || got.Fingerprint != rec.Fingerprint {
				t.Fatalf("Get: %+v, %v, %v", got, ok, err)
			}
			docs, err := c.Collection(coll).Documents(ctx).GetAll()
			if err != nil {
				t.Fatal(err)
			}
			if len(docs) != 1 || docs[0].Ref.ID != firestorelock.DocID(tc.key) || docs[0].Ref.Parent.ID != coll || docs[0].Ref.Parent.Parent != nil {
				t.Fatalf("the collection holds %d documents; want the one with the key's DocID, at its top level", len(docs))
			}
			rec.Fence, rec.Response = 4, []byte("again")
			if ok, err := s.Put(ctx, rec, time.Hour); err != nil || !ok {
				t.Fatalf("second Put: %v, %v", ok, err)
			}
			if deleted, err := s.Delete(ctx, tc.key); err != nil || !deleted {
				t.Fatalf("Delete: %v, %v", deleted, err)
			}
			if _, ok, err := s.Get(ctx, tc.key); err != nil || ok {
				t.Fatalf("Get after Delete: %v, %v", ok, err)
			}
			if n := count(t, c, coll); n != 0 {
				t.Fatalf("%d documents left after Delete", n)
			}
		})
	}
}
