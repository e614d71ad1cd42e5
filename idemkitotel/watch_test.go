package idemkitotel_test

import (
	"testing"

	"github.com/idemkit/idemkit/idemkitotel"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// TestStoreKeepsNotification: the measured store is a store.Watcher
// exactly when the store it wraps is one, so waiting duplicates are still
// woken by the backend's notification with telemetry on.
func TestStoreKeepsNotification(t *testing.T) {
	h, err := idemkitotel.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := h.Store(memstore.New()).(store.Watcher); !ok {
		t.Fatal("the measured memstore is not a Watcher")
	}
	if _, ok := h.Store(struct{ store.Store }{memstore.New()}).(store.Watcher); ok {
		t.Fatal("the measured store claims to notify over a store that cannot")
	}
}
