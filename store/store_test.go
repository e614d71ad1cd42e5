package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
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
		{"claim", store.ValidateClaim("k", time.Millisecond)},
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
		{"claim with empty key", store.ValidateClaim("", time.Second)},
		{"claim with zero ttl", store.ValidateClaim("k", 0)},
		{"claim with sub-millisecond ttl", store.ValidateClaim("k", time.Millisecond-1)},
		{"claim with negative ttl", store.ValidateClaim("k", -time.Second)},
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

func TestState(t *testing.T) {
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

func TestTooLarge(t *testing.T) {
	err := store.TooLarge("complete", 10, 5)
	if !errors.Is(err, store.ErrTooLarge) || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("TooLarge = %v; want InvalidArgument matching ErrTooLarge", err)
	}
}

func TestNextFence(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	for _, c := range []struct {
		name string
		prev lock.Fence
		want lock.Fence
	}{
		{"no previous fence: the clock", 0, 1_700_000_000_000},
		{"an older fence: the clock", 5, 1_700_000_000_000},
		{"a fence of this millisecond: one more", 1_700_000_000_000, 1_700_000_000_001},
		{"a fence ahead of the clock: one more", 1_700_000_000_500, 1_700_000_000_501},
	} {
		if got := store.NextFence(c.prev, now); got != c.want {
			t.Errorf("%s: NextFence(%v) = %v; want %v", c.name, c.prev, got, c.want)
		}
	}
	// Sub-millisecond parts of the clock do not matter.
	if got := store.NextFence(0, now.Add(999*time.Microsecond)); got != 1_700_000_000_000 {
		t.Errorf("NextFence within the millisecond = %v", got)
	}
}

func TestKeepUntil(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	clockFence := lock.Fence(now.UnixMilli())
	for _, c := range []struct {
		name string
		rec  store.Record
		want time.Time
	}{
		{"an outcome: its expiry", store.Record{State: store.StateCompleted, Fence: clockFence, ExpiresAt: now.Add(time.Hour)}, now.Add(time.Hour)},
		{"a claim: its lease and the retention", store.Record{State: store.StateClaimed, Fence: clockFence, ExpiresAt: now.Add(time.Second)}, now.Add(time.Second + store.ClaimRetention)},
		{"a released claim: past its fence", store.Record{Fence: clockFence, ExpiresAt: now}, now.Add(time.Millisecond)},
		{"a fence ahead of the expiry: past the fence", store.Record{State: store.StateCompleted, Fence: clockFence + 5000, ExpiresAt: now.Add(time.Second)}, now.Add(5001 * time.Millisecond)},
	} {
		if got := store.KeepUntil(c.rec); !got.Equal(c.want) {
			t.Errorf("%s: KeepUntil = %v; want %v", c.name, got, c.want)
		}
	}
}
