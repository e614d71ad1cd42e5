package firestorestore

import (
	"context"
	"sync"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

var _ store.Watcher = (*Store)(nil)

const (
	// defaultMaxListeners is documented on WithMaxListeners.
	defaultMaxListeners = 50
	// runOutMargin pads the wait for a lease's end, so that Firestore's
	// clock has passed it when the watches wake.
	runOutMargin = time.Millisecond
	// defaultLinger is how long a listener outlives its last watch, so
	// that waiters who stop watching to claim, and watch again when they
	// lose (a lock's, under contention), keep one listener.
	defaultLinger = 5 * time.Second
)

// never is the channel of a watch that could not be set up.
var never = make(chan struct{})

// listeners are a store's snapshot listeners, one per watched key.
type listeners struct {
	mu      sync.Mutex
	m       map[string]*listener // the running listeners, by key
	running int                  // listener goroutines not yet ended
	started int                  // listeners ever started
	applied int                  // snapshots taken in (tests wait for them)
}

// listener is the snapshot listener of one key's record document and the
// watches it serves. listeners.mu guards its fields but key, cancel, ready
// and ok (written before ready closes).
type listener struct {
	key    string
	cancel context.CancelFunc
	ready  chan struct{} // closed once the first snapshot is in (ok) or the listener ended before it
	ok     bool          // the first snapshot is in; written before ready closes
	ended  bool          // no longer in the map: stopped, or failed
	n      int           // watches not yet stopped
	ch     chan struct{} // closed to wake the current watches, then replaced
	at     time.Time     // Firestore's time of the latest news applied
	fence  idemkit.Fence // the live claim that news showed; 0 for none
	last   *doc          // that news
	seq    int           // news applied: a run-out timer armed before the last is stale
	timer  *time.Timer   // wakes the watches when the claim's lease runs out
	idle   *time.Timer   // stops the listener once it has lingered without watches
}

// Watch implements [store.Watcher] with a snapshot listener on the key's
// document, shared by the key's watches in this process; the first starts
// it and returns once its first snapshot is in. The watches close when the
// live claim last seen ends or runs out (an extension changes nothing),
// and at once when there is none, so a caller need not read again after
// watching. The store's own reads and writes are news too, ordered by
// Firestore's times. A listener that fails wakes its watches and ends; one
// without watches lingers five seconds.
//
// A watch that cannot be set up (ctx ended first, the listener failed
// first, an invalid key, [WithMaxListeners] listeners busy) never fires.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	if engine.ValidateKey(key) != nil || ctx.Err() != nil {
		return never, func() {}
	}
	ls := &s.listeners
	ls.mu.Lock()
	l := ls.m[key]
	if l == nil {
		if !ls.room(s.cfg.listeners) {
			ls.mu.Unlock()
			return never, func() {}
		}
		l = s.listen(key)
	}
	l.n++
	if l.idle != nil {
		l.idle.Stop()
		l.idle = nil
	}
	ch := l.ch
	ls.mu.Unlock()
	stop := sync.OnceFunc(func() { ls.unwatch(l, s.cfg.linger) })
	select {
	case <-l.ready:
	case <-ctx.Done():
	}
	select {
	case <-l.ready:
		if l.ok {
			ls.mu.Lock()
			defer ls.mu.Unlock()
			if l.fence == 0 && ch == l.ch {
				l.wake() // no live claim to wait for
			}
			return ch, stop
		}
	default:
	}
	stop()
	return never, func() {}
}

// room reports whether a listener can start within limit, stopping a
// lingering one if it must (under ls.mu).
func (ls *listeners) room(limit int) bool {
	if len(ls.m) < limit {
		return true
	}
	for _, l := range ls.m {
		if l.n == 0 {
			ls.end(l)
			return true
		}
	}
	return false
}

// listen starts the listener of key (under s.listeners.mu).
func (s *Store) listen(key string) *listener {
	ls := &s.listeners
	lctx, cancel := context.WithCancel(context.Background())
	l := &listener{key: key, cancel: cancel, ready: make(chan struct{}), ch: make(chan struct{})}
	if ls.m == nil {
		ls.m = make(map[string]*listener)
	}
	ls.m[key] = l
	ls.running++
	ls.started++
	go ls.run(l, s.ref(key).Snapshots(lctx))
	return l
}

// run applies the snapshots of it to l until it is stopped or fails.
func (ls *listeners) run(l *listener, it *firestore.DocumentSnapshotIterator) {
	defer it.Stop()
	first := true
	for {
		snap, err := it.Next()
		ls.mu.Lock()
		if err != nil {
			// Stopped, or failed for good (the client retries and resumes
			// what is transient): a change may have been missed.
			ls.end(l)
			l.wake()
			ls.running--
			ls.mu.Unlock()
			if first {
				close(l.ready)
			}
			return
		}
		ls.applied++
		// A document this store did not write is no claim to wait for.
		d, err := decode("watch", l.key, snap)
		if err != nil {
			d = &doc{readTime: snap.ReadTime}
		}
		ls.learn(l, d)
		if first {
			first, l.ok = false, true
			close(l.ready)
		}
		ls.mu.Unlock()
	}
}

// news passes what one of the store's reads or writes (its commit time as
// readTime) showed of a document to its listener, if any.
func (ls *listeners) news(d *doc) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.m[d.key]; l != nil && l.ok {
		ls.learn(l, d)
	}
}

// learn applies news of l's document unless l knows later (under ls.mu).
func (ls *listeners) learn(l *listener, d *doc) {
	if l.ended || d.readTime.IsZero() || (l.ok && !d.readTime.After(l.at)) {
		return
	}
	l.at, l.last = d.readTime, d
	l.seq++
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	var fence idemkit.Fence // the live claim the news shows; 0 for none
	if d.live() && d.state == store.StateClaimed {
		fence = d.fence
	}
	if l.fence != 0 && fence != l.fence {
		l.wake() // the claim the watches wait for has ended
	}
	l.fence = fence
	if fence != 0 {
		seq := l.seq
		l.timer = time.AfterFunc(d.expiresAt().Sub(d.readTime)+runOutMargin, func() {
			ls.mu.Lock()
			defer ls.mu.Unlock()
			if l.seq == seq && l.fence == fence {
				// The lease ran out without an extension: the record can be
				// claimed.
				l.fence = 0
				l.wake()
			}
		})
	}
}

// claimedSince returns the live claim of key this process learnt of after
// the time at (as a hot key's waiters, woken together, make).
func (ls *listeners) claimedSince(key string, at time.Time) (*doc, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.m[key]
	if l == nil || l.fence == 0 || !l.at.After(at) {
		return nil, false
	}
	return l.last, true
}

// wake closes the channel of l's current watches (under listeners.mu).
func (l *listener) wake() {
	close(l.ch)
	l.ch = make(chan struct{})
}

// unwatch ends one watch of l; after its last, l lingers, then stops.
func (ls *listeners) unwatch(l *listener, linger time.Duration) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l.n--
	if l.n > 0 || l.ended {
		return
	}
	if linger <= 0 {
		ls.end(l)
		return
	}
	l.idle = time.AfterFunc(linger, func() {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		if l.n == 0 {
			ls.end(l)
		}
	})
}

// end takes l out of the map and stops it (under ls.mu).
func (ls *listeners) end(l *listener) {
	if l.ended {
		return
	}
	l.ended = true
	if ls.m[l.key] == l {
		delete(ls.m, l.key)
	}
	l.cancel()
	for _, t := range []*time.Timer{l.timer, l.idle} {
		if t != nil {
			t.Stop()
		}
	}
	l.timer, l.idle = nil, nil
}
