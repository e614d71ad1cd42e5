package middleware

import (
	"sync"
	"time"
)

// renewals schedules the lease renewals of one guard's calls on one timer.
// A lease waits in a queue until its next renewal falls due, a third of the
// lease TTL after its claim was sent or its last renewal ended (or, if that
// is earlier than the renewal of the lease queued last, with it: never
// later than a third of the TTL after it joined). So the queue is in the
// order the renewals fall due, and the timer is armed for its head. A call that ends before its first renewal falls due only leaves the
// queue: it arms and stops no timer of its own, and starts no goroutine.
// (The timer is not stopped when the queue empties: armed for a lease that
// left, it fires once, finds nothing due and is not armed again.)
type renewals struct {
	mu         sync.Mutex
	head, tail *lease      // the queue, linked through lease.prev and lease.next
	timer      *time.Timer // created on first use; runs fire
	armed      time.Time   // when the timer fires; zero when it is not armed
}

// add queues l for a renewal a third of the lease TTL after from, which is
// never later than now: when the claim was sent, or when the last renewal
// ended. l is not queued and not stopped: the caller holds l.mu, or nobody
// else has l yet.
func (r *renewals) add(l *lease, from time.Time) {
	due := from.Add(l.g.cfg.leaseTTL / 3)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tail != nil && due.Before(r.tail.due) {
		due = r.tail.due // keep the queue in order (another call's claim was sent later, but it got here first)
	}
	l.due, l.queued = due, true
	l.prev, l.next = r.tail, nil
	if r.tail != nil {
		r.tail.next = l
	} else {
		r.head = l
	}
	r.tail = l
	if r.armed.IsZero() || due.Before(r.armed) {
		r.arm(due)
	}
}

// remove takes l out of the queue, if it is there.
func (r *renewals) remove(l *lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unlink(l)
}

// unlink takes l out of the queue, if it is there. The caller holds r.mu.
func (r *renewals) unlink(l *lease) {
	if !l.queued {
		return
	}
	if l.prev != nil {
		l.prev.next = l.next
	} else {
		r.head = l.next
	}
	if l.next != nil {
		l.next.prev = l.prev
	} else {
		r.tail = l.prev
	}
	l.prev, l.next, l.queued = nil, nil, false
}

// arm sets the timer to fire at due. The caller holds r.mu.
func (r *renewals) arm(due time.Time) {
	r.armed = due
	d := time.Until(due)
	if r.timer == nil {
		r.timer = time.AfterFunc(d, r.fire)
		return
	}
	r.timer.Reset(d)
}

// fire takes the leases whose renewals are due out of the queue, arms the
// timer for the next one, and renews them, each on a goroutine of its own
// (this one for the first): a renewal waits for the backend.
func (r *renewals) fire() {
	now := time.Now()
	var due []*lease
	r.mu.Lock()
	r.armed = time.Time{}
	for r.head != nil && !now.Before(r.head.due) {
		l := r.head
		r.unlink(l)
		due = append(due, l)
	}
	if r.head != nil {
		r.arm(r.head.due)
	}
	r.mu.Unlock()
	for i, l := range due {
		if i > 0 {
			go l.renew()
		}
	}
	if len(due) > 0 {
		due[0].renew()
	}
}
