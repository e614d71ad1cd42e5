package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// TestList: List reads a Lister's records as an operator sees them (the
// size of each response and whether it is sealed, never the response),
// through Seal and through a decorator that unwraps; a store that cannot
// list is refused with InvalidArgument, and so is a bad limit.
func TestList(t *testing.T) {
	current, _ := guardtest.SealKeys()
	inner := memstore.New()
	sealed, err := store.Seal(inner, current)
	if err != nil {
		t.Fatal(err)
	}
	complete(t, inner, "p:plain", "http-v2:fp", []byte("plain"), time.Hour)
	complete(t, sealed, "p:sealed", "http-v2:fp", []byte("secret"), time.Hour)
	complete(t, inner, "q:other", "http-v2:fp", []byte("other"), time.Hour)
	for _, s := range []store.Store{inner, sealed, unwrapping{sealed}} {
		page, next, err := store.List(t.Context(), s, "p:", "", 10)
		if err != nil || next != "" || len(page) != 2 {
			t.Fatalf("List through %T: %+v, %q, %v", s, page, next, err)
		}
		plain, seal := page[0], page[1]
		if plain.Key != "p:plain" || plain.Size != 5 || plain.Sealed || plain.Response != nil || plain.State != store.StateCompleted ||
			seal.Key != "p:sealed" || seal.Size != len("secret")+guardtest.SealOverhead(current) || !seal.Sealed || seal.Response != nil {
			t.Fatalf("List through %T: %+v", s, page)
		}
	}
	if _, _, err := store.List(t.Context(), notLister{inner}, "p:", "", 10); !errors.Is(err, idemkit.ErrInvalidArgument) {
		t.Fatalf("List of a store that cannot list: %v; want InvalidArgument", err)
	}
	if _, _, err := store.List(t.Context(), inner, "p:", "", 0); !errors.Is(err, idemkit.ErrInvalidArgument) {
		t.Fatalf("List with limit 0: %v; want InvalidArgument", err)
	}
}

// unwrapping is a decorator that unwraps to the store it wraps.
type unwrapping struct{ store.Store }

func (u unwrapping) Unwrap() store.Store { return u.Store }

// notLister hides its store's List.
type notLister struct{ store.Store }
