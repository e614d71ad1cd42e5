package firestorestore

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/leased"
	"github.com/idemkit/idemkit/store"
)

// TestKeepUntilIsTheStoreRule checks that the engine's own copy of the rule
// for when a document may go (what the sweeper judges and what expireAt
// and tombstones are written from) is the store contract's,
// leased.KeepUntil, for every state, around the fence's floor, with and
// without a clock step.
func TestKeepUntilIsTheStoreRule(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000).UTC()
	f := idemkit.Fence(now.UnixMilli())
	for _, step := range []time.Duration{0, time.Millisecond, leased.DefaultMaxClockStep, time.Hour} {
		if got, want := fenceFloor(f, step), leased.FenceFloor(f, step); !got.Equal(want) {
			t.Errorf("fenceFloor(%v, %v) = %v; want %v", f, step, got, want)
		}
		for _, state := range []store.State{released, store.StateClaimed, store.StateCompleted, store.StateNotReplayable} {
			for _, life := range []time.Duration{-time.Hour, 0, time.Second, 2 * time.Minute, time.Hour} {
				rec := store.Record{State: state, Fence: f, ExpiresAt: now.Add(life)}
				if got, want := keepRecord(rec, step), leased.KeepUntil(rec, step); !got.Equal(want) {
					t.Errorf("keepRecord(%v, expiry %v, step %v) = %v; want %v", state, life, step, got, want)
				}
			}
		}
	}
	if got := fenceFloor(^idemkit.Fence(0), time.Hour); !got.Equal(maxTimestamp) {
		t.Errorf("the floor of the largest fence is %v; want Firestore's last timestamp %v", got, maxTimestamp)
	}
}
