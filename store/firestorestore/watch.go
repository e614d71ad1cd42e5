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

// defaultMaxListeners is documented on WithMaxListeners.
const defaultMaxListeners = 50

// runOutMargin is added to the time left of a claim's lease before a
// listener wakes its watches for the lease's end, so that Firestore's
// clock has passed it by then.
const runOutMargin = time.Millisecond

// never is the channel of a watch that could not be set up: it never
// closes, and the caller polls.
var never = make(chan struct{})

// listeners are a store's snapshot listeners: one per watched key,
// shared by every watch of the key in this process.
type listeners struct {
	mu      sync.Mutex
	m       map[string]*listener // the running listeners, by key
	running int                  // listener goroutines not yet ended (their streams open or closing)
	started int                  // listeners ever started
	applied int                  // snapshots taken in by all listeners (tests wait for them)
}

// listener is the snapshot listener of one key's record document and the
// watches it serves. Its fields but key, cancel, ready and ok (written
// before ready closes, read after) are guarded by the store's
// listeners.mu.
type listener struct {
	key    string
	cancel context.CancelFunc
	ready  chan struct{} // closed once the first snapshot is in (ok) or the listener ended before it
	ok     bool          // the first snapshot is in; written before ready closes
	ended  bool          // no longer in the map: stopped, or failed
	n      int           // watches not yet stopped
	ch     chan struct{} // closed to wake the current watches, then replaced
	fence  idemkit.Fence // the live claim the last snapshot showed; 0 for none
	seq    int           // snapshots applied: a run-out timer armed before the last is stale
	timer  *time.Timer   // wakes the watches when the claim's lease runs out
}

// Watch implements [store.Watcher] with a Firestore snapshot listener on
// the key's record document: one per watched key, shared by every watch
// of the key in this process, started by the key's first watch and
// stopped when its last watch stops. Watch returns once the listener has
// delivered its first snapshot, so the watch is in place. The watches
// close when a snapshot shows that the claim the listener last saw is no
// longer there: an outcome (completed or not replayable), a tombstone
// (released or deleted), no document, or a claim with another fence; and
// when that claim's lease runs out without an extension (by Firestore's
// time as the snapshot read it), since the record is then claimable. An
// extension changes nothing. When the listener fails, its watches are
// woken once (their callers read the record again and watch anew, which
// starts a new listener) and it ends.
//
// A watch that cannot be set up returns a channel that never closes (the
// caller polls): ctx ended before the first snapshot came, the listener
// failed before it, the key is invalid, or the store already runs as many
// listeners as [WithMaxListeners] allows.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	if engine.ValidateKey(key) != nil || ctx.Err() != nil {
		return never, func() {}
	}
	ls := &s.listeners
	ls.mu.Lock()
	l := ls.m[key]
	if l == nil {
		if len(ls.m) >= s.cfg.listeners {
			ls.mu.Unlock()
			return never, func() {}
		}
		l = s.listen(key)
	}
	l.n++
	ch := l.ch
	ls.mu.Unlock()
	stop := sync.OnceFunc(func() { ls.unwatch(l) })
	select {
	case <-l.ready:
	case <-ctx.Done():
	}
	select {
	case <-l.ready:
		if l.ok {
			return ch, stop
		}
	default:
	}
	stop()
	return never, func() {}
}

// listen starts the listener of key. The caller holds s.listeners.mu.
func (s *Store) listen(key string) *listener {
	ls := &s.listeners
	// The listener outlives the watch that starts it: its context is its
	// own, ended when its last watch stops.
	lctx, cancel := context.WithCancel(context.Background())
	l := &listener{key: key, cancel: cancel, ready: make(chan struct{}), ch: make(chan struct{})}
	if ls.m == nil {
		ls.m = make(map[string]*listener)
	}
	ls.m[key] = l
	ls.running++
	ls.started++
	it := s.ref(key).Snapshots(lctx)
	go ls.run(l, it)
	return l
}

// run delivers the snapshots of it to l until the listener is stopped or
// fails.
func (ls *listeners) run(l *listener, it *firestore.DocumentSnapshotIterator) {
	defer it.Stop()
	first := true
	for {
		snap, err := it.Next()
		ls.mu.Lock()
		if err != nil {
			// Stopped (its context ended), or failed: the client retries
			// what is transient itself, resuming where it was, so this is
			// for good. Wake the watches once, spuriously: a change may have
			// been missed. Their callers read the record again and watch
			// anew, which starts a new listener.
			ls.end(l)
			l.wake()
			ls.running--
			ls.mu.Unlock()
			if first {
				close(l.ready)
			}
			return
		}
		ls.apply(l, snap)
		if first {
			first, l.ok = false, true
			close(l.ready)
		}
		ls.mu.Unlock()
	}
}

// apply takes in a snapshot of l's document. The caller holds ls.mu.
func (ls *listeners) apply(l *listener, snap *firestore.DocumentSnapshot) {
	ls.applied++
	l.seq++
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	var fence idemkit.Fence // the live claim the snapshot shows; 0 for none
	var left time.Duration
	// A document this store did not write is no claim to wait for (the
	// callers' next read reports it).
	if d, err := decode("watch", l.key, snap); err == nil && d.exists && d.state == store.StateClaimed && !d.readTime.IsZero() {
		if left = d.expiresAt().Sub(d.readTime); left > 0 {
			fence = d.fence
		}
	}
	if l.fence != 0 && fence != l.fence {
		l.wake() // the claim the watches wait for has ended
	}
	l.fence = fence
	if fence != 0 && !l.ended {
		seq := l.seq
		l.timer = time.AfterFunc(left+runOutMargin, func() {
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

// wake closes the channel of l's current watches; later watches get a new
// one. The caller holds the listeners' mu.
func (l *listener) wake() {
	close(l.ch)
	l.ch = make(chan struct{})
}

// unwatch ends one watch of l, and the listener with its last watch.
func (ls *listeners) unwatch(l *listener) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l.n--
	if l.n == 0 {
		ls.end(l)
	}
}

// end takes l out of the map and stops it (its goroutine ends soon
// after). The caller holds ls.mu.
func (ls *listeners) end(l *listener) {
	if l.ended {
		return
	}
	l.ended = true
	if ls.m[l.key] == l {
		delete(ls.m, l.key)
	}
	l.cancel()
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
}
