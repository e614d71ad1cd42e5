package firestorestore_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// TestKeyKinds claims, completes, reads, deletes and claims again a record
// under each kind of key, each in a collection of its own, and checks that
// its document lands in that collection itself (never a sub-collection),
// under the key itself when Firestore can hold it as an id and under a
// marked hash otherwise.
func TestKeyKinds(t *testing.T) {
	t.Parallel()
	c := client(t, testenv.FirestoreProject(t))
	ctx := t.Context()
	for i, tc := range []struct {
		name, key string
		readable  bool
	}{
		{"guard key", "idempotency:tenant-7:order 42", true},
		{"unicode composed", "caf\u00e9 \U0001F512", true},
		{"unicode decomposed", "cafe\u0301", true},
		{"spaces", "  ", true},
		{"longest", strings.Repeat("k", store.MaxKeyBytes), true},
		{"slash", "/", false},
		{"path", "tenant/orders/42", false},
		{"trailing slash", "orders/", false},
		{"dot", ".", false},
		{"dot dot", "..", false},
		{"reserved form", "__x__", false},
		{"reserved form with dots", "__.*__", false},
		{"hash marker", "#sha256:abc", false},
		{"longest with slashes", strings.Repeat("a/", store.MaxKeyBytes/2), false},
		{"invalid utf-8", "\xff\xfe/\x00", false},
		{"control characters", "a\x00b\n\t", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			coll := fmt.Sprint("records_", i)
			s := newStore(t, c, firestorestore.WithCollection(coll))
			claim, claimed, err := s.Claim(ctx, tc.key, "fp-"+tc.name, time.Hour)
			if err != nil || !claimed || claim.Key != tc.key {
				t.Fatalf("Claim: %v, %v", claimed, err)
			}
			out := store.Record{Key: tc.key, Fingerprint: claim.Fingerprint, State: store.StateCompleted, Response: []byte(tc.name), Fence: claim.Fence}
			if ok, err := s.Complete(ctx, out, time.Hour); err != nil || !ok {
				t.Fatalf("Complete: %v, %v", ok, err)
			}
			got, ok, err := s.Get(ctx, tc.key)
			if err != nil || !ok || got.Key != tc.key || string(got.Response) != tc.name || got.Fence != claim.Fence || got.Fingerprint != out.Fingerprint {
				t.Fatalf("Get: %+v, %v, %v", got, ok, err)
			}
			snaps := docs(t, c, coll)
			if len(snaps) != 1 || snaps[0].Ref.ID != firestorestore.DocID(tc.key) || snaps[0].Ref.Parent.ID != coll || snaps[0].Ref.Parent.Parent != nil {
				t.Fatalf("the collection holds %d documents; want the one with the key's id, at its top level", len(snaps))
			}
			if readable := snaps[0].Ref.ID == tc.key; readable != tc.readable {
				t.Fatalf("the document id is the key: %v; want %v", readable, tc.readable)
			}
			if deleted, err := s.Delete(ctx, tc.key); err != nil || !deleted {
				t.Fatalf("Delete: %v, %v", deleted, err)
			}
			if _, ok, err := s.Get(ctx, tc.key); err != nil || ok {
				t.Fatalf("Get after Delete: %v, %v", ok, err)
			}
			again, claimed, err := s.Claim(ctx, tc.key, "fp", time.Hour)
			if err != nil || !claimed || again.Fence <= claim.Fence {
				t.Fatalf("Claim after Delete: %v, %v, fence %v after %v", claimed, err, again.Fence, claim.Fence)
			}
			if n := len(docs(t, c, coll)); n != 1 {
				t.Fatalf("%d documents; want one", n)
			}
		})
	}
}
