package leased_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/leased"
	"github.com/idemkit/idemkit/store"
)

func TestNextFence(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	for _, c := range []struct {
		name string
		prev idemkit.Fence
		want idemkit.Fence
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
	clockFence := idemkit.Fence(now.UnixMilli())
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
		if got := leased.KeepUntil(c.rec, 0); !got.Equal(c.want) {
			t.Errorf("%s: KeepUntil = %v; want %v", c.name, got, c.want)
		}
	}
}
