package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// Put is fenced: a writer holding an older lease cannot overwrite the record
// of a newer one.
func Example() {
	ctx := context.Background()
	s := memstore.New()

	rec := store.Record{Key: "orders:42", State: store.StateCompleted, Response: []byte(`{"order":42}`), Fence: 2}
	ok, _ := s.Put(ctx, rec, 24*time.Hour)
	fmt.Println("fence 2 written:", ok)

	stale := rec
	stale.Fence, stale.Response = 1, []byte(`{"order":"stale"}`)
	ok, _ = s.Put(ctx, stale, 24*time.Hour)
	fmt.Println("fence 1 written:", ok)

	got, _, _ := s.Get(ctx, "orders:42")
	fmt.Println(got.State, string(got.Response), got.Fence)
	// Output:
	// fence 2 written: true
	// fence 1 written: false
	// completed {"order":42} 000000000000002
}
