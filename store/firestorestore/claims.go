package firestorestore

import (
	"sync"
	"time"

	"github.com/idemkit/idemkit"
)

// maxKnownClaims bounds the claims a store remembers (see [claims]).
const maxKnownClaims = 1 << 14

// claimID names a claim: its key and fence.
type claimID struct {
	key   string
	fence idemkit.Fence
}

// known is what the store remembers of a claim it wrote: when it was made,
// the update time of its last write to the claim's document (the claim or
// its last extension), and when the answer came, by the local monotonic
// clock.
type known struct {
	createdAt  time.Time
	updateTime time.Time
	seen       time.Time
}

// now estimates Firestore's clock now from the claim's last update time
// and the local monotonic clock: never later than Firestore's clock.
func (k known) now() time.Time { return k.updateTime.Add(time.Since(k.seen)) }

// claims remembers the claims this store made and still holds, so that
// Extend, Complete and Release can write with one commit conditioned on
// the document's update time instead of reading it first. It is bounded:
// past [maxKnownClaims] it forgets an arbitrary claim, whose next
// operation then reads the document first.
type claims struct {
	mu sync.Mutex
	m  map[claimID]known
}

func (c *claims) get(key string, fence idemkit.Fence) (known, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.m[claimID{key, fence}]
	return k, ok
}

func (c *claims) put(key string, fence idemkit.Fence, createdAt, updateTime time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[claimID]known)
	}
	id := claimID{key, fence}
	if _, ok := c.m[id]; !ok && len(c.m) >= maxKnownClaims {
		for old := range c.m {
			delete(c.m, old)
			break
		}
	}
	c.m[id] = known{createdAt: createdAt, updateTime: updateTime, seen: time.Now()}
}

func (c *claims) drop(key string, fence idemkit.Fence) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, claimID{key, fence})
}
