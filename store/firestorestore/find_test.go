package firestorestore_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// TestFindClaim checks that FindClaim finds the live claim whose
// fingerprint is a lock id, from any store on the collection, and nothing
// once it was completed, released or ran out; that only such claims carry
// the field it queries (a guard's records and outcomes do not, so its
// index costs them nothing); and that a fingerprint that is not a lock id
// finds nothing.
func TestFindClaim(t *testing.T) {
	t.Parallel()
	project := testenv.FirestoreProject(t)
	c := client(t, project)
	s, other := newStore(t, c), newStore(t, client(t, project))
	ctx := t.Context()
	ids := []string{"AAAAAAAAAAAAAAAAAAAAAA", "abcdefghijklmnopqrstu-", "0123456789_-ABCDEFGHIJ", "zzzzzzzzzzzzzzzzzzzzzz"}
	lockIDs := func() map[string]any {
		t.Helper()
		m := map[string]any{}
		for _, d := range docs(t, c, firestorestore.DefaultCollection) {
			if v, ok := d.Data()["lockId"]; ok {
				m[d.Data()["key"].(string)] = v
			}
		}
		return m
	}
	find := func(fp string) (store.Record, bool) {
		t.Helper()
		rec, ok, err := other.FindClaim(ctx, fp)
		if err != nil {
			t.Fatalf("FindClaim(%q): %v", fp, err)
		}
		return rec, ok
	}
	claims := make([]store.Record, len(ids))
	for i, id := range ids {
		var err error
		var claimed bool
		ttl := time.Hour
		if i == 3 {
			ttl = time.Second
		}
		if claims[i], claimed, err = s.Claim(ctx, "lock/"+id, id, ttl); err != nil || !claimed {
			t.Fatalf("Claim: %v, %v", claimed, err)
		}
		got, ok := find(id)
		if !ok || got.Key != "lock/"+id || got.Fence != claims[i].Fence || got.State != store.StateClaimed || !got.ExpiresAt.Equal(claims[i].ExpiresAt) {
			t.Fatalf("FindClaim(%q) = %+v, %v; want the claim %+v", id, got, ok, claims[i])
		}
	}
	if _, _, err := s.Extend(ctx, "lock/"+ids[0], claims[0].Fence, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if got, ok := find(ids[0]); !ok || !got.ExpiresAt.After(claims[0].ExpiresAt) {
		t.Fatalf("FindClaim after Extend = %+v, %v; want the extended claim", got, ok)
	}
	guard, _, err := s.Claim(ctx, "order-1", "sha256:abcdefghijklmnopqrstuv", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := find("sha256:abcdefghijklmnopqrstuv"); ok {
		t.Fatal("FindClaim found a claim whose fingerprint is not a lock id")
	}
	if got := lockIDs(); len(got) != len(ids) || got["order-1"] != nil {
		t.Fatalf("documents with a lockId field: %v; want the %d lock claims only", got, len(ids))
	}
	if ok, err := s.Complete(ctx, store.Record{Key: "lock/" + ids[0], Fingerprint: ids[0], State: store.StateCompleted, Fence: claims[0].Fence}, time.Hour); err != nil || !ok {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	if ok, err := s.Release(ctx, "lock/"+ids[1], claims[1].Fence); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	if ok, err := s.Delete(ctx, "lock/"+ids[2]); err != nil || !ok {
		t.Fatalf("Delete: %v, %v", ok, err)
	}
	if ok, err := s.Complete(ctx, store.Record{Key: "order-1", Fingerprint: guard.Fingerprint, State: store.StateCompleted, Fence: guard.Fence}, time.Hour); err != nil || !ok {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	time.Sleep(time.Second + margin)
	for _, id := range ids {
		if got, ok := find(id); ok {
			t.Errorf("FindClaim(%q) = %+v after its claim ended", id, got)
		}
	}
	if got := lockIDs(); len(got) != 1 || got["lock/"+ids[3]] == nil {
		t.Fatalf("documents with a lockId field: %v; want only the run-out claim's", got)
	}
}
