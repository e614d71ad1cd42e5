package pgstore

import (
	"context"
	"sync"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// sharing lets the claims of one key in flight together in this process
// (a hot key's waiters, woken at once) share a statement. A claim joins
// the key's next statement, sent once the one in flight has come back, so
// that it only answers claims that began before it. Its sender gets its
// answer; the others the record it found or made, as busy or the outcome.
// A claim whose shared statement failed runs its own.
type sharing struct {
	mu   sync.Mutex
	keys map[string]*keyClaims // by stored key
}

type keyClaims struct {
	pending, inflight *sharedClaim
}

type sharedClaim struct {
	members int
	sent    bool
	done    chan struct{} // closed once the answer is set
	rec     store.Record
	err     error
}

// claim answers a claim of the stored key sk, sharing the statement that
// claim (the claim's own) runs with the other claims of sk.
func (sh *sharing) claim(ctx context.Context, sk string, claim func() (store.Record, bool, error)) (store.Record, bool, error) {
	sh.mu.Lock()
	if sh.keys == nil {
		sh.keys = make(map[string]*keyClaims)
	}
	k := sh.keys[sk]
	if k == nil {
		k = &keyClaims{}
		sh.keys[sk] = k
	}
	c := k.pending
	if c == nil {
		c = &sharedClaim{done: make(chan struct{})}
		k.pending = c
	}
	c.members++
	for !c.sent && k.inflight != nil {
		prev := k.inflight.done
		sh.mu.Unlock()
		select {
		case <-prev:
		case <-ctx.Done():
			sh.mu.Lock()
			if c.members--; !c.sent && c.members == 0 {
				k.pending = nil
				sh.drop(sk, k)
			}
			sh.mu.Unlock()
			return store.Record{}, false, idemkit.CheckContext(ctx, "claim")
		}
		sh.mu.Lock()
	}
	if c.sent {
		sh.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return store.Record{}, false, idemkit.CheckContext(ctx, "claim")
		}
		if c.err != nil {
			return claim()
		}
		return c.rec, false, nil
	}
	k.pending, k.inflight, c.sent = nil, c, true
	sh.mu.Unlock()

	rec, claimed, err := claim()

	sh.mu.Lock()
	c.rec, c.err = rec, err
	c.rec.Replaced = nil // the sender's alone
	c.rec.Steps = nil    // the sender's too: the others are answered busy
	k.inflight = nil
	close(c.done)
	sh.drop(sk, k)
	sh.mu.Unlock()
	return rec, claimed, err
}

// drop forgets sk when nothing of it is pending or in flight. sh.mu is held.
func (sh *sharing) drop(sk string, k *keyClaims) {
	if k.pending == nil && k.inflight == nil && sh.keys[sk] == k {
		delete(sh.keys, sk)
	}
}
