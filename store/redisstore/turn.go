package redisstore

import (
	"context"
	"maps"
	"slices"
	"time"
)

// A release hands the key to the store's waiters in turn (see
// [Store.Watch]): the oldest watch of the key fires and gets a handoff, a
// moment to claim the key during which the store's other claims of it
// wait; one that lets it pass wakes the next. Watches that stop before
// they fire keep their place for a moment (a ghost), since a waiter whose
// poll timer fired first usually watches again right after its refused
// claim.

// slot is one watch's place in its key's line.
type slot struct {
	ch    chan struct{}
	fired bool
	ghost time.Time // non-zero: stopped before it fired, keeps its place until then
}

// handoff is the moment a watch woken by a release has to claim the key.
type handoff struct {
	slot           *slot
	done           chan struct{} // closed when it ends
	claimed, taken bool          // the woken watch stopped; a claim took the handoff
	missed         bool          // another release came meanwhile
	timer          *time.Timer
}

// enqueue places a new watch: in the place of the oldest ghost (the same
// waiter watching again, most likely), else last.
func (e *entry) enqueue() *slot {
	now := time.Now()
	e.queue = slices.DeleteFunc(e.queue, func(sl *slot) bool { return !sl.ghost.IsZero() && !now.Before(sl.ghost) })
	sl := &slot{ch: make(chan struct{})}
	if i := slices.IndexFunc(e.queue, func(sl *slot) bool { return !sl.ghost.IsZero() }); i >= 0 {
		e.queue[i] = sl
	} else {
		e.queue = append(e.queue, sl)
	}
	return sl
}

// fireAll wakes every watch and ends the handoff.
func (e *entry) fireAll() {
	for _, sl := range e.queue {
		if !sl.fired && sl.ghost.IsZero() {
			sl.fired = true
			close(sl.ch)
		}
	}
	e.queue = nil
	e.endHandoff()
}

// wakeOne wakes the oldest watch and gives it handoffWait to claim the
// key; a release during a handoff is kept for its end.
func (l *listener) wakeOne(e *entry) {
	if ho := e.handoff; ho != nil {
		ho.missed = true
		return
	}
	i := slices.IndexFunc(e.queue, func(sl *slot) bool { return sl.ghost.IsZero() })
	if i < 0 {
		return
	}
	sl := e.queue[i]
	e.queue = slices.Delete(e.queue, i, i+1)
	sl.fired = true
	close(sl.ch)
	ho := &handoff{slot: sl, done: make(chan struct{})}
	ho.timer = time.AfterFunc(handoffWait, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if e.handoff == ho && !ho.taken {
			e.endHandoff()
			l.wakeOne(e)
		}
	})
	e.handoff = ho
}

func (e *entry) endHandoff() {
	if ho := e.handoff; ho != nil {
		ho.timer.Stop()
		close(ho.done)
		e.handoff = nil
	}
}

// entry calls f with the listener and the entry of key's watches, under
// the listener's lock, when this store watches key.
func (s *Store) entry(key string, f func(l *listener, e *entry)) {
	if s.watch.entries.Load() == 0 {
		return
	}
	name := s.redisKey(key)
	s.watch.mu.Lock()
	ls := slices.Collect(maps.Values(s.watch.listeners))
	s.watch.mu.Unlock()
	for _, l := range ls {
		l.mu.Lock()
		e := l.entries[name]
		if e != nil {
			f(l, e)
		}
		l.mu.Unlock()
		if e != nil {
			return
		}
	}
}

// released wakes the oldest watch of key after a Release through this
// store, without waiting for its notification (which then wakes nobody
// more), so that the releaser's next claim of the key waits its turn.
func (s *Store) released(key, fence string) {
	s.entry(key, func(l *listener, e *entry) {
		l.releasedOnce(e, fence)
	})
}

// noTurn is the done of a claim that took no turn.
func noTurn(bool, error) {}

// releasedOnce wakes the oldest watch of e for the release of fence, the
// first time it hears of it: from the Release through this store or its
// message (which comes before or after it, and may come late).
func (l *listener) releasedOnce(e *entry, fence string) {
	e.held = time.Time{}
	if slices.Contains(e.released[:], fence) {
		return
	}
	copy(e.released[1:], e.released[:])
	e.released[0] = fence
	l.wakeOne(e)
}

// turn is called before a claim of key through this store, so that the
// key goes to this store's waiters in turn, however fast its last holder
// or a polling waiter claims it again. The first claim after a watch woken
// by a release stopped takes the handoff (it is, most likely, that
// waiter's). Any other claim, while watches wait for the key and it is
// handed over or held by a claim of this store, takes its place in the
// line instead of racing the woken watch to the server: it waits for its
// turn, at most handoffWait and not past ctx, then goes on. done records
// the claim's outcome; released reports that the claim takes a handoff,
// so that the key most likely holds a released claim's tombstone.
func (s *Store) turn(ctx context.Context, key string, ttl time.Duration) (done func(claimed bool, err error), released bool) {
	if s.watch.entries.Load() == 0 {
		return noTurn, false // before the variables the closures capture, which would cost allocations
	}
	var (
		taken *handoff
		owner *listener
		e     *entry
		sl    *slot
	)
	s.entry(key, func(l *listener, en *entry) {
		owner, e = l, en
		ho := en.handoff
		switch {
		case ho != nil && ho.claimed && !ho.taken:
			ho.taken, taken = true, ho
		case slices.ContainsFunc(en.queue, func(sl *slot) bool { return sl.ghost.IsZero() }) && (ho != nil || time.Now().Before(en.held)):
			en.refs++ // a watch of its own, which keeps the subscription
			sl = en.enqueue()
		}
	})
	if owner == nil {
		return noTurn, false
	}
	if sl != nil {
		t := time.NewTimer(handoffWait)
		select {
		case <-sl.ch:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		owner.mu.Lock()
		if ho := e.handoff; sl.fired && ho != nil && ho.slot == sl {
			ho.taken, taken = true, ho
		}
		owner.mu.Unlock()
		owner.release(e, sl)
	}
	return func(claimed bool, err error) {
		owner.mu.Lock()
		defer owner.mu.Unlock()
		if claimed {
			e.held = time.Now().Add(ttl)
		}
		if taken == nil || e.handoff != taken {
			return
		}
		e.endHandoff()
		if !claimed && (err != nil || taken.missed) {
			owner.wakeOne(e) // the key is free, or may be: the next one's turn
		}
	}, taken != nil
}
