package leased_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/leased"
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
		{"key of MaxKeyBytes", leased.ValidateKey(strings.Repeat("k", store.MaxKeyBytes))},
		{"key of any bytes", leased.ValidateKey("\x00\xff")},
		{"claim", leased.ValidateClaim("k", time.Millisecond)},
		{"fenced", leased.ValidateFenced("extend", "k", 1)},
		{"complete", leased.ValidateComplete(out, time.Millisecond)},
		{"complete not replayable", leased.ValidateComplete(store.Record{Key: "k", State: store.StateNotReplayable, Fence: 1}, time.Hour)},
		{"ttl", leased.ValidateTTL("op", time.Millisecond)},
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
		{"empty key", leased.ValidateKey("")},
		{"long key", leased.ValidateKey(long)},
		{"claim with empty key", leased.ValidateClaim("", time.Second)},
		{"claim with zero ttl", leased.ValidateClaim("k", 0)},
		{"claim with sub-millisecond ttl", leased.ValidateClaim("k", time.Millisecond-1)},
		{"claim with negative ttl", leased.ValidateClaim("k", -time.Second)},
		{"fenced with long key", leased.ValidateFenced("release", long, 1)},
		{"fenced with zero fence", leased.ValidateFenced("release", "k", 0)},
		{"complete with empty key", leased.ValidateComplete(mod(func(r *store.Record) { r.Key = "" }), time.Second)},
		{"complete with zero fence", leased.ValidateComplete(mod(func(r *store.Record) { r.Fence = 0 }), time.Second)},
		{"complete with claimed state", leased.ValidateComplete(mod(func(r *store.Record) { r.State = store.StateClaimed }), time.Second)},
		{"complete with zero state", leased.ValidateComplete(mod(func(r *store.Record) { r.State = 0 }), time.Second)},
		{"complete with unknown state", leased.ValidateComplete(mod(func(r *store.Record) { r.State = 9 }), time.Second)},
		{"complete with zero ttl", leased.ValidateComplete(out, 0)},
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
	err := leased.TooLarge("complete", 10, 5)
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
		if got := leased.NextFence(c.prev, now); got != c.want {
			t.Errorf("%s: NextFence(%v) = %v; want %v", c.name, c.prev, got, c.want)
		}
	}
	// Sub-millisecond parts of the clock do not matter.
	if got := leased.NextFence(0, now.Add(999*time.Microsecond)); got != 1_700_000_000_000 {
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
		if got := leased.KeepUntil(c.rec); !got.Equal(c.want) {
			t.Errorf("%s: KeepUntil = %v; want %v", c.name, got, c.want)
		}
	}
}
