package firestorelock

import (
	"context"
	"sync"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit/lock"
)

// sharing lets the acquires of one key that run at once in this process
// share their work, as the waiters of a hot key do when its release wakes
// them all: they share one read of the key's document, and only one of
// them writes at a time. Each call's answer is still one it could have
// got alone, at an instant within the call (see [Locker.Acquire]).
type sharing struct {
	mu     sync.Mutex
	reads  map[string]*keyReads // document id → its reads
	writes map[string]*write    // document id → the acquire writing it
}

// keyReads are the reads of one document by acquires.
type keyReads struct {
	pending  *sharedRead // the next read: not sent yet, joined by every acquire that arrives
	inflight *sharedRead // the read sent, if any
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

// read returns a read of ref sent after the call began: the document's
// pending read, which the call joins. The first of its members to find no
// read of the document in flight sends it, under its own ctx; a member
// whose shared read failed reads again by itself, so that it never gets
// another call's failure.
func (sh *sharing) read(ctx context.Context, ref *firestore.DocumentRef, get func(context.Context, *firestore.DocumentRef) (*firestore.DocumentSnapshot, error)) (*firestore.DocumentSnapshot, error) {
	id := ref.ID
	sh.mu.Lock()
	if sh.reads == nil {
		sh.reads = make(map[string]*keyReads)
	}
	kr := sh.reads[id]
	if kr == nil {
		kr = &keyReads{}
		sh.reads[id] = kr
	}
	r := kr.pending
	if r == nil {
		r = &sharedRead{done: make(chan struct{})}
		kr.pending = r
	}
	r.members++
	for !r.sent && kr.inflight != nil {
		prev := kr.inflight.done
		sh.mu.Unlock()
		select {
		case <-prev:
		case <-ctx.Done():
			sh.mu.Lock()
			if !r.sent { // another member, or the next acquire of the key, sends r
				r.members--
				if r.members == 0 && kr.pending == r {
					kr.pending = nil
					sh.dropReads(id, kr)
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
	kr.pending, kr.inflight, r.sent = nil, r, true
	sh.mu.Unlock()

	r.snap, r.err = get(ctx, ref)

	sh.mu.Lock()
	kr.inflight = nil
	close(r.done)
	sh.dropReads(id, kr)
	sh.mu.Unlock()
	return r.snap, r.err
}

// dropReads forgets the document id when no read of it is pending or in
// flight. The caller holds mu.
func (sh *sharing) dropReads(id string, kr *keyReads) {
	if kr.pending == nil && kr.inflight == nil && sh.reads[id] == kr {
		delete(sh.reads, id)
	}
}

// write is an acquire writing its lease.
type write struct {
	done chan struct{} // closed when won is set
	won  bool
}

// write runs f, the write of an acquire whose read found the key free,
// unless another acquire of the key in this process is writing: it then
// waits for that one, and answers "locked" if it got the lease (whose
// commit came after this call's read, which found the key free, so the
// key was held within this call), and otherwise tries again.
func (sh *sharing) write(ctx context.Context, id string, f func() (lock.Lease, bool, error)) (lock.Lease, bool, error) {
	for {
		sh.mu.Lock()
		w := sh.writes[id]
		if w == nil {
			w = &write{done: make(chan struct{})}
			if sh.writes == nil {
				sh.writes = make(map[string]*write)
			}
			sh.writes[id] = w
			sh.mu.Unlock()
			lease, ok, err := f()
			sh.mu.Lock()
			w.won = ok
			delete(sh.writes, id)
			close(w.done)
			sh.mu.Unlock()
			return lease, ok, err
		}
		sh.mu.Unlock()
		select {
		case <-w.done:
		case <-ctx.Done():
			return lock.Lease{}, false, ctx.Err()
		}
		if w.won {
			return lock.Lease{}, false, nil
		}
	}
}
