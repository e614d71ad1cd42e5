package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

func TestValidatePut(t *testing.T) {
	ok := store.Record{Key: "k", State: store.StateCompleted}
	if err := store.ValidatePut(ok, time.Second); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		rec store.Record
		ttl time.Duration
	}{
		"empty key": {store.Record{State: store.StateCompleted}, time.Second},
		"long key":  {store.Record{Key: strings.Repeat("k", store.MaxKeyBytes+1), State: store.StateCompleted}, time.Second},
		"state 0":   {store.Record{Key: "k"}, time.Second},
		"state 9":   {store.Record{Key: "k", State: 9}, time.Second},
		"ttl 0":     {ok, 0},
	} {
		if err := store.ValidatePut(c.rec, c.ttl); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if err := store.ValidateKey(strings.Repeat("k", store.MaxKeyBytes)); err != nil {
		t.Fatalf("a key of exactly MaxKeyBytes: %v", err)
	}
}

func TestStateAndTooLarge(t *testing.T) {
	if store.StateCompleted.String() != "completed" || store.StateNotReplayable.String() != "not-replayable" || store.State(7).String() != "State(7)" {
		t.Fatal("State.String")
	}
	err := store.TooLarge("put", 10, 5)
	if !errors.Is(err, store.ErrTooLarge) || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("TooLarge = %v", err)
	}
}
