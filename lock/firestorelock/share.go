package firestorelock

import (
	"context"
	"sync"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit/lock"
)

// sharing lets the acquires of one key that run at once in this process
// share their work, as the waiters of a hot key do when its release wakes
// them all: they share one read of the key's document, and only one of
// them writes at a time. Each call's answer is still one it could have
// got alone, at an instant within the call (see [Locker.Acquire]).
type sharing struct {
	mu   sync.Mutex
	keys map[string]*keyShare // document id → the acquires of it in progress
}

// keyShare is the shared state of the acquires of one document in
// progress. It lives while at least one of them runs.
type keyShare struct {
	active   int           // the acquires of the document in progress
	pending  *sharedRead   // the next read: not sent yet, joined by every acquire that arrives
	inflight *sharedRead   // the read sent, if any
	writing  chan struct{} // while an acquire writes its lease: closed when it is done
	won      time.Time     // the latest commit time of a lease an acquire in progress (or since ended) got
}

// sharedRead is one read of a document, answering every acquire that
// joined it before it was sent.
type sharedRead struct {
	members int
	sent    bool
	done    chan struct{} // closed when snap and err are set
	snap    *firestore.DocumentSnapshot
	err     error
}

// enter registers an acquire of the document id; the acquire calls leave
// with what enter returned when it ends.
func (sh *sharing) enter(id string) *keyShare {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.keys == nil {
		sh.keys = make(map[string]*keyShare)
	}
	ks := sh.keys[id]
	if ks == nil {
		ks = &keyShare{}
		sh.keys[id] = ks
	}
	ks.active++
	return ks
}

// leave ends an acquire of the document id that entered as ks, and
// forgets the document when it was the last one.
func (sh *sharing) leave(id string, ks *keyShare) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ks.active--
	if ks.active == 0 && sh.keys[id] == ks {
		delete(sh.keys, id)
	}
}

// granted records that an acquire of the document id in progress got a
// lease whose write committed at the server time at.
func (sh *sharing) granted(id string, at time.Time) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if ks := sh.keys[id]; ks != nil && at.After(ks.won) {
		ks.won = at
	}
}

// read returns a read of ref sent after the call began: the document's
// pending read, which the call joins. The first of its members to find no
// read of the document in flight sends it, under its own ctx; a member
// whose shared read failed reads again by itself, so that it never gets
// another call's failure.
func (sh *sharing) read(ctx context.Context, ks *keyShare, ref *firestore.DocumentRef, get func(context.Context, *firestore.DocumentRef) (*firestore.DocumentSnapshot, error)) (*firestore.DocumentSnapshot, error) {
	sh.mu.Lock()
	r := ks.pending
	if r == nil {
		r = &sharedRead{done: make(chan struct{})}
		ks.pending = r
	}
	r.members++
	for !r.sent && ks.inflight != nil {
		prev := ks.inflight.done
		sh.mu.Unlock()
		select {
		case <-prev:
		case <-ctx.Done():
			sh.mu.Lock()
			if !r.sent { // another member, or the next acquire of the key, sends r
				r.members--
				if r.members == 0 && ks.pending == r {
					ks.pending = nil
				}
			}
			sh.mu.Unlock()
			return nil, ctx.Err()
		}
		sh.mu.Lock()
	}
	if r.sent {
		sh.mu.Unlock()
		select {
		case <-r.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if r.err != nil {
			return get(ctx, ref)
		}
		return r.snap, nil
	}
	ks.pending, ks.inflight, r.sent = nil, r, true
	sh.mu.Unlock()

	r.snap, r.err = get(ctx, ref)

	sh.mu.Lock()
	ks.inflight = nil
	close(r.done)
	sh.mu.Unlock()
	return r.snap, r.err
}

// write runs f, the write of an acquire whose read at the server time
// readAt found the key free, unless the key was granted to an acquire of
// this process by a commit after readAt: that lease was held within this
// call, which answers "locked" without writing. While another acquire of
// the key in this process writes, the call waits for it, then decides
// again.
func (sh *sharing) write(ctx context.Context, ks *keyShare, readAt time.Time, f func() (lock.Lease, bool, error)) (lock.Lease, bool, error) {
	for {
		sh.mu.Lock()
		if ks.won.After(readAt) {
			sh.mu.Unlock()
			return lock.Lease{}, false, nil
		}
		done := ks.writing
		if done == nil {
			done = make(chan struct{})
			ks.writing = done
			sh.mu.Unlock()
			lease, ok, err := f()
			sh.mu.Lock()
			ks.writing = nil
			close(done)
			sh.mu.Unlock()
			return lease, ok, err
		}
		sh.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return lock.Lease{}, false, ctx.Err()
		}
	}
}
