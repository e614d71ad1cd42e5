package pglock

import (
	"context"
	"sync"

	"github.com/idemkit/idemkit/lock"
)

// attempts lets the acquires of one key that run at once in this process
// share one acquire statement, as the waiters of a hot key do when its
// release wakes them all (see [Locker.Acquire]).
type attempts struct {
	mu   sync.Mutex
	keys map[string]*keyAttempts // storage key → its attempts
}

// keyAttempts are the acquire statements of one key.
type keyAttempts struct {
	pending  *attempt // the next statement: not sent yet, joined by every acquire that arrives
	inflight *attempt // the statement sent, if any
}

// attempt is one acquire statement, answering every acquire that joined
// it before it was sent.
type attempt struct {
	members int
	sent    bool
	done    chan struct{} // closed when failed is set
	failed  bool          // the statement failed: it answers no one else
}

// do answers an acquire of the storage key sk with the key's pending
// attempt, which it joins. The first of its members to find no attempt of
// the key in flight runs f, its own acquire, and returns its result. The
// other members answer "locked": the statement was sent after they
// began, and either found the key held or took it for the member that
// sent it. A member whose shared attempt failed runs f itself, so that it
// never reports another call's failure.
func (as *attempts) do(ctx context.Context, sk string, f func() (lock.Lease, bool, error)) (lock.Lease, bool, error) {
	as.mu.Lock()
	if as.keys == nil {
		as.keys = make(map[string]*keyAttempts)
	}
	ka := as.keys[sk]
	if ka == nil {
		ka = &keyAttempts{}
		as.keys[sk] = ka
	}
	a := ka.pending
	if a == nil {
		a = &attempt{done: make(chan struct{})}
		ka.pending = a
	}
	a.members++
	for !a.sent && ka.inflight != nil {
		prev := ka.inflight.done
		as.mu.Unlock()
		select {
		case <-prev:
		case <-ctx.Done():
			as.mu.Lock()
			if !a.sent { // another member, or the next acquire of the key, sends a
				a.members--
				if a.members == 0 && ka.pending == a {
					ka.pending = nil
					as.drop(sk, ka)
				}
			}
			as.mu.Unlock()
			return lock.Lease{}, false, ctx.Err()
		}
		as.mu.Lock()
	}
	if a.sent {
		as.mu.Unlock()
		select {
		case <-a.done:
		case <-ctx.Done():
			return lock.Lease{}, false, ctx.Err()
		}
		if a.failed {
			return f()
		}
		return lock.Lease{}, false, nil
	}
	ka.pending, ka.inflight, a.sent = nil, a, true
	as.mu.Unlock()

	lease, ok, err := f()

	as.mu.Lock()
	a.failed = err != nil
	ka.inflight = nil
	close(a.done)
	as.drop(sk, ka)
	as.mu.Unlock()
	return lease, ok, err
}

// drop forgets the storage key sk when no attempt of it is pending or in
// flight. The caller holds mu.
func (as *attempts) drop(sk string, ka *keyAttempts) {
	if ka.pending == nil && ka.inflight == nil && as.keys[sk] == ka {
		delete(as.keys, sk)
	}
}
