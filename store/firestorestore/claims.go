package firestorestore

import (
	"sync"
	"time"

	"github.com/idemkit/idemkit"
)

const maxKnownClaims = 1 << 14

type claimID struct {
	key   string
	fence idemkit.Fence
}

// known is a claim as the store last wrote or read it.
type known struct {
	createdAt  time.Time // when the claim was made
	updateTime time.Time // the document's update time: the precondition of the next write
	expiresAt  time.Time // when the lease runs out
	at         time.Time // Firestore's time when the store learnt this (a commit or read time) ...
	sent       time.Time // ... and the local monotonic time when it sent that request
	fp         string    // the claim's fingerprint
	keep       time.Time // the document's expireAt
	steps      int       // the claim's steps ...
	stepBytes  int       // ... and their storage size ([stepsSize])
}

// now bounds Firestore's clock from above: its time after the request was
// sent, plus the local time since.
func (k known) now() time.Time { return k.at.Add(time.Since(k.sent)) }

// known is the claim d holds, as read.
func (d *doc) known() known {
	return known{
		createdAt: d.createdAt, updateTime: d.updateTime, expiresAt: d.expiresAt(), at: d.readTime, sent: d.readLocally,
		fp: d.fp, keep: d.expireAt, steps: len(d.steps), stepBytes: stepsSize(d.steps),
	}
}

// claims remembers the claims this store made and still holds, so that
// Extend, Complete and Release can commit without reading first. Past
// [maxKnownClaims] it forgets an arbitrary one (which then reads first).
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

func (c *claims) put(key string, fence idemkit.Fence, k known) {
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
	c.m[id] = k
}

func (c *claims) drop(key string, fence idemkit.Fence) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, claimID{key, fence})
}
