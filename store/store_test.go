package store_test

import (
	"testing"

	"github.com/idemkit/idemkit/store"
)

func TestStateNamesValidityAndDone(t *testing.T) {
	for _, c := range []struct {
		s           store.State
		name        string
		valid, done bool
	}{
		{0, "State(0)", false, false},
		{store.StateClaimed, "claimed", true, false},
		{store.StateCompleted, "completed", true, true},
		{store.StateNotReplayable, "not-replayable", true, true},
		{7, "State(7)", false, false},
	} {
		if c.s.String() != c.name || c.s.Valid() != c.valid || c.s.Done() != c.done {
			t.Errorf("%s: String %q, Valid %v, Done %v; want %q, %v, %v", c.name, c.s.String(), c.s.Valid(), c.s.Done(), c.name, c.valid, c.done)
		}
	}
}
