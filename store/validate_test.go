package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

func TestValidate(t *testing.T) {
	long := strings.Repeat("k", store.MaxKeyBytes+1)
	out := store.Record{Key: "k", State: store.StateCompleted, Fence: 1}
	valid := []struct {
		name string
		err  error
	}{
		{"key of MaxKeyBytes", store.ValidateKey(strings.Repeat("k", store.MaxKeyBytes))},
		{"key of any bytes", store.ValidateKey("\x00\xff")},
		{"claim", errors.Join(store.ValidateKey("k"), store.ValidateTTL("claim", time.Millisecond))},
		{"fenced", store.ValidateFenced("extend", "k", 1)},
		{"complete", store.ValidateComplete(out, time.Millisecond)},
		{"complete not replayable", store.ValidateComplete(store.Record{Key: "k", State: store.StateNotReplayable, Fence: 1}, time.Hour)},
		{"ttl", store.ValidateTTL("op", time.Millisecond)},
	}
	for _, c := range valid {
		if c.err != nil {
			t.Errorf("%s: %v", c.name, c.err)
		}
	}
	mod := func(f func(r *store.Record)) store.Record { r := out; f(&r); return r }
	invalid := []struct {
		name string
		err  error
	}{
		{"empty key", store.ValidateKey("")},
		{"long key", store.ValidateKey(long)},
		{"claim with empty key", errors.Join(store.ValidateKey(""), store.ValidateTTL("claim", time.Second))},
		{"claim with zero ttl", errors.Join(store.ValidateKey("k"), store.ValidateTTL("claim", 0))},
		{"claim with sub-millisecond ttl", errors.Join(store.ValidateKey("k"), store.ValidateTTL("claim", time.Millisecond-1))},
		{"claim with negative ttl", errors.Join(store.ValidateKey("k"), store.ValidateTTL("claim", -time.Second))},
		{"fenced with long key", store.ValidateFenced("release", long, 1)},
		{"fenced with zero fence", store.ValidateFenced("release", "k", 0)},
		{"complete with empty key", store.ValidateComplete(mod(func(r *store.Record) { r.Key = "" }), time.Second)},
		{"complete with zero fence", store.ValidateComplete(mod(func(r *store.Record) { r.Fence = 0 }), time.Second)},
		{"complete with claimed state", store.ValidateComplete(mod(func(r *store.Record) { r.State = store.StateClaimed }), time.Second)},
		{"complete with zero state", store.ValidateComplete(mod(func(r *store.Record) { r.State = 0 }), time.Second)},
		{"complete with unknown state", store.ValidateComplete(mod(func(r *store.Record) { r.State = 9 }), time.Second)},
		{"complete with zero ttl", store.ValidateComplete(out, 0)},
	}
	for _, c := range invalid {
		if idemkit.CodeOf(c.err) != idemkit.CodeInvalidArgument {
			t.Errorf("%s: %v; want InvalidArgument", c.name, c.err)
		} else if strings.Contains(c.err.Error(), long[:40]) {
			t.Errorf("%s: the message repeats the key", c.name)
		}
	}
}

func TestTooLarge(t *testing.T) {
	err := store.TooLarge("complete", 10, 5)
	if !errors.Is(err, store.ErrTooLarge) || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("TooLarge = %v; want InvalidArgument matching ErrTooLarge", err)
	}
}
