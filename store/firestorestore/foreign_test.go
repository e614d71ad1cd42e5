package firestorestore_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// TestForeignDocuments checks that documents this package did not write,
// at a record's document id, are reported as Internal by every operation
// that reads them, and never overwritten.
func TestForeignDocuments(t *testing.T) {
	t.Parallel()
	c := client(t, testenv.FirestoreProject(t))
	s := newStore(t, c)
	ctx := t.Context()
	valid := func() map[string]any {
		return map[string]any{
			"key": "foreign", "fingerprint": "fp", "state": int64(1), "response": []byte{}, "fence": int64(1),
			"ttlMicros": int64(time.Hour / time.Microsecond), firestorestore.FieldExpireAt: time.Now().Add(time.Hour), "writeId": "w",
		}
	}
	with := func(field string, v any) map[string]any {
		m := valid()
		if v == nil {
			delete(m, field)
		} else {
			m[field] = v
		}
		return m
	}
	for _, tc := range []struct {
		name string
		data map[string]any
	}{
		{"no fields", map[string]any{"other": true}},
		{"another key", with("key", "someone else's key")},
		{"state of another type", with("state", "claimed")},
		{"unknown state", with("state", int64(9))},
		{"negative fence", with("fence", int64(-1))},
		{"no lifetime", with("ttlMicros", nil)},
		{"createdAt of another type", with("createdAt", "yesterday")},
		{"no expireAt", with(firestorestore.FieldExpireAt, nil)},
		{"no write id", with("writeId", nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := c.Collection(firestorestore.DefaultCollection).Doc("foreign")
			if _, err := ref.Set(ctx, tc.data); err != nil {
				t.Fatal(err)
			}
			before, err := ref.Get(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Get(ctx, "foreign"); idemkit.CodeOf(err) != idemkit.CodeInternal {
				t.Errorf("Get: %v; want Internal", err)
			}
			if _, _, err := s.Claim(ctx, "foreign", "fp", time.Hour); idemkit.CodeOf(err) != idemkit.CodeInternal {
				t.Errorf("Claim: %v; want Internal", err)
			}
			if _, err := s.Put(ctx, store.Record{Key: "foreign", State: store.StateCompleted, Fence: 9}, time.Hour); idemkit.CodeOf(err) != idemkit.CodeInternal {
				t.Errorf("Put: %v; want Internal", err)
			}
			if _, err := s.Complete(ctx, store.Record{Key: "foreign", State: store.StateCompleted, Fence: 1}, time.Hour); idemkit.CodeOf(err) != idemkit.CodeInternal {
				t.Errorf("Complete: %v; want Internal", err)
			}
			if _, err := s.Delete(ctx, "foreign"); idemkit.CodeOf(err) != idemkit.CodeInternal {
				t.Errorf("Delete: %v; want Internal", err)
			}
			after, err := ref.Get(ctx)
			if err != nil || !after.UpdateTime.Equal(before.UpdateTime) {
				t.Fatalf("the foreign document was changed: %v", err)
			}
		})
	}
}
