package firestorelock

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// Watch timing.
const (
	// defaultWatchLimit is how many keys at once have a snapshot listener
	// unless [WithWatchLimit] says otherwise.
	defaultWatchLimit = 32

	// watchSetup bounds how long Watch waits for a new listener's first
	// snapshot: a watch not in place by then is woken by the snapshots
	// that follow, and the waiter's back-off still runs.
	watchSetup = time.Second

	// watchLinger is how long a key's listener is kept once no watch needs
	// it, so that a hot key's waiters, who stop watching to try the lock
	// and watch again when they lose, keep one listener.
	watchLinger = 5 * time.Second
)

// watchBackoff spaces new listeners after listeners failed: from 100ms,
// doubling, jittered, at most 5s.
func watchBackoff() idemkit.Backoff {
	return idemkit.Backoff{Base: 100 * time.Millisecond, Max: 5 * time.Second}
}

// never is the channel of a watch that cannot be set up: it never closes,
// so the waiter sleeps out its back-off.
var never = make(chan struct{})

// closedChan returns a closed channel: a watch that fires at once.
func closedChan() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// Watch implements [lock.Watcher] with a snapshot listener on the key's
// lock document, shared by every watch of the key. The channel closes when
// the document stops holding the lease last seen live in it (it is
// released, deleted, reduced to a tombstone or taken over by another
// lease: Firestore sends the listener the write itself), at once when the
// document holds no live lease, and when that lease runs out, judged by
// Firestore's times (expiry writes nothing, so the listener keeps a
// timer). It may also close spuriously: when a listener fails, every watch
// of its key fires once, since a change may have been missed.
//
// The listener's snapshots are not its only news: this locker's own reads
// and writes of the document (an acquire's read, a lease it wrote, a
// release) count too, in the order of their Firestore times. So a release
// through this locker wakes the key's watches as soon as it returns, and
// a waiter that lost the lock to another acquire of this process watches
// the new lease at once. The first watch of a key starts its listener and
// waits (at most a second) for the key's state; later watches join it. A
// watch whose caller's acquire found the key held while the latest news
// shows it free reads the document once.
//
// A listener is stopped about 5 s after its last watch ended, or sooner
// when its slot is needed: at most [WithWatchLimit] keys (default 32) have
// one at once, since each is a stream of its own on the client's
// connection. A watch of a key beyond that, a watch while listeners keep
// failing (new ones are then started with a back-off from 100ms to 5s),
// and every watch of a locker built with WithWatchLimit(0) never fires:
// the waiter sleeps out its back-off. The client retries a listen stream
// that breaks and resumes it where it stopped, so the changes made
// meanwhile still arrive; the waiters' back-off covers the gap.
func (l *Locker) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return closedChan(), func() {}
	}
	ws := &l.watch
	if l.cfg.watchLimit == 0 {
		return never, func() {}
	}
	id := docID(key)
	ws.mu.Lock()
	dw := ws.byID[id]
	if dw == nil {
		if ws.cooling || !ws.room(l.cfg.watchLimit) {
			ws.mu.Unlock()
			return never, func() {}
		}
		dw = ws.start(l, l.locks.Doc(id))
	}
	w := &waiter{ch: make(chan struct{})}
	dw.waiters[w] = struct{}{}
	known, free, ready := dw.known, dw.free, dw.ready
	ws.mu.Unlock()
	stop := func() { ws.remove(dw, w) }
	switch {
	case !known:
		t := time.NewTimer(watchSetup)
		select {
		case <-ready:
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	case free:
		// The latest news showed the key free, but the caller's acquire
		// has just found it held: news of the holder is on its way, or
		// the key was released since. One read tells; from it on, the
		// listener (or this locker's own operations) brings the rest.
		snap, err := l.get(ctx, dw.ref)
		if err != nil {
			break // the caller's back-off covers it
		}
		n := seen(snap)
		ws.mu.Lock()
		ws.learn(dw, n)
		ws.mu.Unlock()
		if !n.live {
			w.wake()
		}
	}
	return w.ch, stop
}

// waiter is one watch: its channel closes once.
type waiter struct {
	ch   chan struct{}
	once sync.Once
}

func (w *waiter) wake() { w.once.Do(func() { close(w.ch) }) }

// watchers are a locker's snapshot listeners, one per watched key.
type watchers struct {
	mu       sync.Mutex
	byID     map[string]*docWatch // document id → its listener
	failures int                  // listeners failed in a row
	cooling  bool                 // no new listener for now: one just failed
	started  int                  // listeners started so far, for tests
}

// docWatch is the listener of one lock document and its watches. The
// watchers' mu guards its fields.
type docWatch struct {
	ref     *firestore.DocumentRef
	cancel  context.CancelFunc
	waiters map[*waiter]struct{}
	ready   chan struct{} // closed once the state is known, or when the listener fails
	known   bool          // the state is known: news arrived
	at      time.Time     // the server time of the latest news
	free    bool          // it showed no live lease (or that lease ran out since)
	holder  string        // the lock id of the live lease it showed
	gen     int           // news applied: the expiry timer of older news does nothing
	expiry  *time.Timer   // fires when that lease runs out
	linger  *time.Timer   // stops the listener once no watch needs it
	done    bool          // stopped: no longer in byID
}

// room reports whether a listener can start within limit, stopping one
// that no watch needs if it must. The caller holds mu.
func (ws *watchers) room(limit int) bool {
	if len(ws.byID) < limit {
		return true
	}
	for _, dw := range ws.byID {
		if len(dw.waiters) == 0 {
			ws.stop(dw)
			return true
		}
	}
	return false
}

// start starts the listener of ref. The caller holds mu.
func (ws *watchers) start(l *Locker, ref *firestore.DocumentRef) *docWatch {
	ctx, cancel := context.WithCancel(context.Background())
	dw := &docWatch{ref: ref, cancel: cancel, waiters: make(map[*waiter]struct{}), ready: make(chan struct{})}
	if ws.byID == nil {
		ws.byID = make(map[string]*docWatch)
	}
	ws.byID[ref.ID] = dw
	ws.started++
	go ws.run(ctx, l, dw)
	return dw
}

// stop stops dw's listener. The caller holds mu.
func (ws *watchers) stop(dw *docWatch) {
	if dw.done {
		return
	}
	dw.done = true
	if ws.byID[dw.ref.ID] == dw {
		delete(ws.byID, dw.ref.ID)
	}
	dw.cancel()
	if dw.expiry != nil {
		dw.expiry.Stop()
	}
	if dw.linger != nil {
		dw.linger.Stop()
	}
	if !dw.known {
		close(dw.ready)
	}
}

// run receives dw's snapshots until it is stopped or fails.
func (ws *watchers) run(ctx context.Context, l *Locker, dw *docWatch) {
	it := dw.ref.Snapshots(ctx)
	defer it.Stop()
	for {
		snap, err := it.Next()
		ws.mu.Lock()
		if dw.done {
			ws.mu.Unlock()
			return
		}
		if err != nil {
			ws.failures++
			if !ws.cooling {
				ws.cooling = true
				time.AfterFunc(watchBackoff().Delay(ws.failures), func() {
					ws.mu.Lock()
					ws.cooling = false
					ws.mu.Unlock()
				})
			}
			ws.stop(dw)
			ws.wakeAll(dw)
			ws.mu.Unlock()
			l.cfg.logger.Debug("firestorelock: a snapshot listener failed; its waiters poll",
				slog.String("code", idemkit.CodeOf(mapError(ctx, "watch", err)).String()))
			return
		}
		ws.failures = 0
		ws.learn(dw, seen(snap))
		ws.mu.Unlock()
	}
}

// leaseAt is what a read or a write showed of a lock document at a
// server time: a live lease (its lock id and expiry), or none.
type leaseAt struct {
	at      time.Time // the read time, or the commit time of a write
	live    bool
	holder  string
	expires time.Time
}

// seen is what snap shows of its document at its read time. A document
// this package cannot decode counts as free: the acquire that follows the
// wake-up reports it.
func seen(snap *firestore.DocumentSnapshot) leaseAt {
	n := leaseAt{at: snap.ReadTime}
	if snap.Exists() {
		if d, err := decode("watch", snap); err == nil && d.live(snap.ReadTime) {
			n.live, n.holder, n.expires = true, d.id, d.expires
		}
	}
	return n
}

// learn applies news of dw's document, unless dw already knows a later
// state: a lease gone, or replaced by another, wakes the watches; a live
// one is timed to its expiry. Every source of news (the listener's
// snapshots, this locker's own reads and writes of the document, a watch's
// read) is timed by Firestore, so their order is the document's. The
// caller holds mu.
func (ws *watchers) learn(dw *docWatch, n leaseAt) {
	if dw.done || (dw.known && !n.at.After(dw.at)) {
		return
	}
	wasKnown, wasHeld, holder := dw.known, dw.known && !dw.free, dw.holder
	dw.at, dw.known = n.at, true
	dw.gen++
	if dw.expiry != nil {
		dw.expiry.Stop()
		dw.expiry = nil
	}
	if !n.live {
		dw.free, dw.holder = true, ""
		ws.wakeAll(dw)
	} else {
		if wasHeld && holder != n.holder {
			ws.wakeAll(dw) // replaced between two pieces of news
		}
		dw.free, dw.holder = false, n.holder
		gen, expires := dw.gen, n.expires
		// Expiry writes nothing: fire when the lease runs out, counted
		// from the time of the news (which arrived after it, so the timer
		// never fires before the expiry by Firestore's clock).
		dw.expiry = time.AfterFunc(expires.Sub(n.at), func() {
			ws.mu.Lock()
			defer ws.mu.Unlock()
			if !dw.done && dw.gen == gen {
				dw.at, dw.free, dw.holder = expires, true, ""
				dw.gen++
				ws.wakeAll(dw)
			}
		})
	}
	if !wasKnown {
		close(dw.ready)
	}
}

// learned applies news of the document whose id is id to its listener,
// if it has one: what this locker's own operations wrote.
func (ws *watchers) learned(id string, n leaseAt) {
	if n.at.IsZero() {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if dw := ws.byID[id]; dw != nil {
		ws.learn(dw, n)
	}
}

// read applies what a read of this locker's own operations showed to the
// document's listener, if it has one.
func (ws *watchers) read(snap *firestore.DocumentSnapshot) {
	if snap == nil || snap.Ref == nil {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if dw := ws.byID[snap.Ref.ID]; dw != nil {
		ws.learn(dw, seen(snap))
	}
}

// wakeAll wakes every watch of dw. The caller holds mu.
func (ws *watchers) wakeAll(dw *docWatch) {
	for w := range dw.waiters {
		w.wake()
	}
	clear(dw.waiters)
	ws.idle(dw)
}

// remove ends the watch w of dw.
func (ws *watchers) remove(dw *docWatch, w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if _, ok := dw.waiters[w]; ok {
		delete(dw.waiters, w)
		if len(dw.waiters) == 0 {
			ws.idle(dw)
		}
	}
}

// idle schedules the stop of dw's listener watchLinger from now, unless a
// watch needs it by then. The caller holds mu.
func (ws *watchers) idle(dw *docWatch) {
	if dw.done {
		return
	}
	if dw.linger != nil {
		dw.linger.Reset(watchLinger)
		return
	}
	dw.linger = time.AfterFunc(watchLinger, func() {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		if len(dw.waiters) == 0 {
			ws.stop(dw)
		}
	})
}
