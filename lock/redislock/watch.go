package redislock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/lock"
	"github.com/redis/go-redis/v9"
)

// Watch notifications.
//
// A lease that some Locker waits for is marked watched in its record (see
// scripts.go): by the Watch that finds it (its look at the key after the
// subscription), by an acquire that it refuses while that acquire's Locker
// watches the key, and from the start when the acquiring Locker watches
// the key; extends and take-overs keep the mark. Every script that ends a
// watched lease (a release, a release or extend that finds it expired)
// publishes the lease's lock id on a channel named like the lock record,
// in the same script, so it costs no round trip of its own, and so does
// IsLocked's cleanup. On a cluster the message is sharded (SPUBLISH) and
// stays on the record's shard. Leases nobody waits for end without one.
//
// A Locker listens on one pub/sub connection (on a cluster, one per master
// that holds a watched key), started by the first Watch and shared by all:
// one subscription per watched key, however many watch it, so the number of
// connections does not grow with the number of waiters.
//
// The watches of a key form a queue, oldest first, and a message wakes the
// first one only: of the waiters of one process, only one can take the
// lock, and waking them all would send them all to the server to be
// refused. The woken waiter gets a short handoff: other acquires of the key
// through this locker wait (at most handoffWait) until it has tried, so
// that a goroutine that has just released the key cannot take it again
// ahead of the waiters (the lock is fair within a process). If the woken
// waiter does not try in time, the next watch is woken; if it is refused
// (another process took the key), its next watch goes first in line. A
// waiter whose poll timer fired before its watch keeps its place for a
// moment (ghostGrace) while it tries, so polling does not send it to the
// back of the queue.

const (
	// watchSetup bounds Watch's setup (the subscription and the check
	// that follows it) whatever the caller's ctx allows.
	watchSetup = time.Second
	// unsubscribeAfter is how long a key's subscription outlives its last
	// watch: a hot key's waiters watch again right after every wake-up.
	unsubscribeAfter = 5 * time.Second
	// closeAfter is how long a listener without subscriptions keeps its
	// connection before it closes it.
	closeAfter = 30 * time.Second
	// housekeeping is the period of a listener's upkeep: unsubscribing,
	// closing, pinging.
	housekeeping = time.Second
	// pingAfter is how long a listener's connection may stay silent before
	// it is pinged; pingTimeout how long the answer may take before the
	// connection is taken for dead.
	pingAfter   = 3 * time.Second
	pingTimeout = 5 * time.Second
	// retryMin and retryMax bound the pause before a new listener after
	// one that never got a subscription through (the server refused the
	// connection or the subscription): it doubles with each such failure.
	retryMin = 100 * time.Millisecond
	retryMax = 5 * time.Second
	// handoffWait is how long a woken watch has to try the key before the
	// next one is woken, and how long other acquires of the key through
	// the locker wait for it at most.
	handoffWait = 50 * time.Millisecond
	// ghostGrace is how long a watch stopped before it fired keeps its
	// place in the queue for the next watch of the key.
	ghostGrace = 250 * time.Millisecond
)

var (
	// never is what a watch that could not be set up returns: it never
	// closes, and the waiter polls.
	never = make(chan struct{})
	// fired is what a watch of a key that is not held returns.
	fired = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

	errNoListener = errors.New("redislock: no listener")
)

func noop() {}

// Watch implements [lock.Watcher]. It returns once the key's subscription
// is in place; then, unless a lease of this locker holds the key (or is
// being handed to one of its watches), it reads the key, so that a release
// just before the subscription is not missed, and marks the lease it finds
// watched, so that its end sends a message. An invalid key gives a closed
// channel.
//
// The watches of a key in one locker wait in line, oldest first: a release
// of the key (also a release or extend that finds the lease expired, and
// IsLocked's cleanup), or the read finding the key free, closes the
// channel of the oldest watch only (the caller's own when it is alone in
// line), since only one waiter can take the lock; its waiter then has a
// moment in which other acquires of the key through this locker wait for
// its try, and the next release closes the next channel. Every channel
// closes, spuriously, when the listener's connection fails (messages may
// have been lost) or a cluster slot moves. A lease that simply runs out
// sends nothing: waiters keep polling.
//
// When the watch cannot be set up within ctx and at most a second (the
// server cannot be reached, refuses the subscription, or the client is not
// a *redis.Client or *redis.ClusterClient), the channel never closes and
// the waiter polls.
func (l *Locker) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return fired, noop
	}
	if ctx.Err() != nil {
		return never, noop
	}
	ctx, cancel := context.WithTimeout(ctx, watchSetup)
	defer cancel()
	name := l.names.lock(key)
	w, ok := l.watch.add(ctx, name)
	if !ok {
		return never, noop
	}
	if !w.known {
		// A release between the caller's last look and the subscription
		// sent no message this watch saw: read the key once now that the
		// watch is in place. If it is free, the oldest watch of the key is
		// woken, as a release would.
		held, err := l.scripts.isLocked.Run(ctx, l.client, []string{name}, "0", "1").Int64()
		if err == nil && held == 0 {
			l.watch.free(w.s)
		}
	}
	return w.slot.ch, w.stop
}

// hub holds a locker's listeners and subscriptions.
type hub struct {
	l *Locker

	mu        sync.Mutex
	listeners map[string]*listener     // by node address ("" on a single node)
	subs      map[string]*subscription // by channel (the lock record's name)
	failures  int                      // listeners in a row that got no subscription through
	retryAt   time.Time                // no new listener before

	// nsubs is len(subs), read without mu: acquires and releases skip
	// the hub while nothing is watched.
	nsubs atomic.Int32
}

// listener is one pub/sub connection and its subscriptions. Its maps and
// flags are guarded by the hub's mu.
type listener struct {
	h       *hub
	addr    string
	ps      *redis.PubSub
	sharded bool

	// wmu orders the subscribe and unsubscribe commands as the map
	// changes that they stand for.
	wmu sync.Mutex

	subs      map[string]*subscription
	unsubs    map[string]int // unsubscribes sent and not yet confirmed, by channel
	dead      bool
	confirmed bool // a subscription went through
	quit      chan struct{}

	rx       atomic.Int64 // when something last arrived, in Unix ns
	pingSent time.Time    // upkeep's own
	empty    time.Time    // upkeep's own: since when subs is empty
}

// subscription is one key's channel, its queue of watches and its
// handoff. Guarded by the hub's mu.
type subscription struct {
	lst   *listener
	name  string
	ready chan struct{} // closed when the subscription is confirmed or has failed
	state subState

	queue      []*slot  // the watches, oldest first
	handoff    *handoff // a woken watch about to try the key
	headReturn bool     // the woken watch was refused: the next watch goes first
	held       time.Time
	used       time.Time // when a watch last came, went or fired

	// ended holds the lock ids of the last leases whose end woke a watch:
	// a release through this locker wakes one as soon as it returns, and
	// its message, which comes before or after, must not wake another.
	ended [8]string
	next  int
}

type subState uint8

const (
	subPending subState = iota
	subOK
	subFailed
)

// slot is one watch's place in its key's queue.
type slot struct {
	ch    chan struct{}
	fired bool
	ghost time.Time // when non-zero: stopped before it fired, keeps its place until then
}

// handoff is the moment a woken watch has to try the key. A handoff
// without a slot is a release through this locker in flight: acquires
// wait for its outcome too.
type handoff struct {
	slot    *slot
	done    chan struct{} // closed when it ends
	claimed bool          // the woken watch was stopped: its waiter is about to try
	taken   bool          // that try has started
	missed  bool          // another message came meanwhile
	timer   *time.Timer
}

// watch is a registered watch.
type watch struct {
	s    *subscription
	slot *slot
	// known is true when the watch needs no read of the key: a lease of
	// this locker held it when the watch was placed, or a woken watch was
	// about to try it (whose outcome wakes the next one if need be).
	known bool
	stop  func()
}

// add registers a watch of the lock record name and returns once its
// subscription is confirmed. ok is false when it cannot be set up.
func (h *hub) add(ctx context.Context, name string) (w *watch, ok bool) {
	h.mu.Lock()
	s := h.subs[name]
	if s == nil {
		h.mu.Unlock()
		lst, err := h.listener(ctx, name)
		if err != nil {
			return nil, false
		}
		// A new subscription: take the write lock first, so that the
		// command goes out in the order of the map changes.
		lst.wmu.Lock()
		h.mu.Lock()
		if lst.dead {
			h.mu.Unlock()
			lst.wmu.Unlock()
			return nil, false
		}
		if s = h.subs[name]; s == nil {
			s = &subscription{lst: lst, name: name, ready: make(chan struct{})}
			h.subs[name] = s
			lst.subs[name] = s
			h.nsubs.Add(1)
			w = h.register(s)
			h.mu.Unlock()
			err := lst.subscribe(ctx, name)
			lst.wmu.Unlock()
			if err != nil {
				lst.fail()
				return nil, false
			}
			return h.await(ctx, w)
		}
		lst.wmu.Unlock()
	}
	w = h.register(s)
	h.mu.Unlock()
	return h.await(ctx, w)
}

// register places a new watch in s's queue: first when the woken watch
// was just refused (it is most likely its waiter's), else in the place of
// the oldest ghost, else last. The caller holds h.mu.
func (h *hub) register(s *subscription) *watch {
	now := time.Now()
	s.used = now
	s.prune(now)
	sl := &slot{ch: make(chan struct{})}
	switch i := slices.IndexFunc(s.queue, func(sl *slot) bool { return !sl.ghost.IsZero() }); {
	case s.headReturn:
		s.headReturn = false
		s.queue = slices.Insert(s.queue, 0, sl)
	case i >= 0:
		s.queue[i] = sl
	default:
		s.queue = append(s.queue, sl)
	}
	w := &watch{s: s, slot: sl, known: now.Before(s.held) || s.handoff != nil}
	var once sync.Once
	w.stop = func() { once.Do(func() { h.stop(w) }) }
	return w
}

// prune drops the ghosts whose time is up. The caller holds h.mu.
func (s *subscription) prune(now time.Time) {
	s.queue = slices.DeleteFunc(s.queue, func(sl *slot) bool { return !sl.ghost.IsZero() && !now.Before(sl.ghost) })
}

// await waits until w's subscription is confirmed.
func (h *hub) await(ctx context.Context, w *watch) (*watch, bool) {
	select {
	case <-w.s.ready:
		if w.s.state == subOK {
			return w, true
		}
	case <-ctx.Done():
	}
	h.drop(w)
	return nil, false
}

// stop ends a watch: a fired one claims its handoff (its waiter is about
// to try the key), a waiting one leaves a ghost in its place.
func (h *hub) stop(w *watch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, sl := w.s, w.slot
	now := time.Now()
	s.used = now
	if sl.fired {
		if ho := s.handoff; ho != nil && ho.slot == sl {
			ho.claimed = true
		}
		return
	}
	if i := slices.Index(s.queue, sl); i >= 0 {
		sl.ghost = now.Add(ghostGrace)
	}
}

// drop removes a watch that is not handed out to its caller (who will try
// the key at once, or not at all). If a message woke it meanwhile, its
// handoff is claimed as a stop would.
func (h *hub) drop(w *watch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, sl := w.s, w.slot
	if sl.fired {
		if ho := s.handoff; ho != nil && ho.slot == sl {
			ho.claimed = true
		}
		return
	}
	if i := slices.Index(s.queue, sl); i >= 0 {
		s.queue = slices.Delete(s.queue, i, i+1)
	}
}

// wakeOne wakes the first watch in s's queue and starts its handoff; a
// message during a handoff is kept for its end. The caller holds h.mu.
func (h *hub) wakeOne(s *subscription) {
	if ho := s.handoff; ho != nil {
		if ho.slot != nil {
			ho.missed = true
			return
		}
		// The release in flight is over.
		s.endHandoff()
	}
	i := slices.IndexFunc(s.queue, func(sl *slot) bool { return sl.ghost.IsZero() })
	if i < 0 {
		return
	}
	sl := s.queue[i]
	s.queue = slices.Delete(s.queue, i, i+1)
	sl.fired = true
	close(sl.ch)
	s.used = time.Now()
	h.startHandoff(s, sl)
}

// startHandoff starts a handoff of s to the woken watch sl, or (sl nil)
// for a release in flight. The caller holds h.mu.
func (h *hub) startHandoff(s *subscription, sl *slot) {
	ho := &handoff{slot: sl, done: make(chan struct{})}
	ho.timer = time.AfterFunc(handoffWait, func() { h.handoffExpired(s, ho) })
	s.handoff = ho
}

// wakeAll wakes every watch of s and ends its handoff. The caller holds
// h.mu.
func (h *hub) wakeAll(s *subscription) {
	for _, sl := range s.queue {
		if sl.ghost.IsZero() {
			sl.fired = true
			close(sl.ch)
		}
	}
	s.queue = nil
	s.endHandoff()
}

// endHandoff ends s's handoff, if any. The caller holds h.mu.
func (s *subscription) endHandoff() {
	if ho := s.handoff; ho != nil {
		ho.timer.Stop()
		close(ho.done)
		s.handoff = nil
	}
}

// handoffExpired wakes the next watch when the woken one did not try the
// key in time.
func (h *hub) handoffExpired(s *subscription, ho *handoff) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.handoff != ho || ho.taken {
		return
	}
	s.endHandoff()
	if ho.slot != nil {
		h.wakeOne(s)
	}
}

// beforeAcquire is called before an acquire of the lock record name
// through the locker. The try of a woken watch takes its handoff. Any other
// acquire, while watches of this locker wait for the key and the key is
// being handed over (or released through the locker, or held by a lease of
// this locker), takes its place in the line instead of racing the woken
// watch to the server: it waits for its turn, at most handoffWait and not
// past ctx, then goes on (leaving its place for its waiter's next watch).
// It returns the key's subscription (nil when the key is not watched) and
// the handoff this acquire takes, if any.
func (h *hub) beforeAcquire(ctx context.Context, name string) (*subscription, *handoff) {
	if h.nsubs.Load() == 0 {
		return nil, nil
	}
	h.mu.Lock()
	s := h.subs[name]
	if s == nil {
		h.mu.Unlock()
		return nil, nil
	}
	if ho := s.take(nil); ho != nil {
		h.mu.Unlock()
		return s, ho
	}
	waiting := slices.ContainsFunc(s.queue, func(sl *slot) bool { return sl.ghost.IsZero() })
	if !waiting || s.handoff == nil && !time.Now().Before(s.held) {
		h.mu.Unlock()
		return s, nil
	}
	w := h.register(s)
	h.mu.Unlock()
	t := time.NewTimer(handoffWait)
	defer t.Stop()
	select {
	case <-w.slot.ch:
	case <-t.C:
	case <-ctx.Done():
	}
	w.stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	return s, s.take(w.slot)
}

// take returns s's handoff, now taken by the caller, when its woken watch
// has claimed it and not yet tried (sl nil), or when it is sl's; else nil.
// The caller holds h.mu.
func (s *subscription) take(sl *slot) *handoff {
	ho := s.handoff
	if ho == nil || ho.taken || !(sl == nil && ho.claimed || sl != nil && ho.slot == sl) {
		return nil
	}
	ho.claimed, ho.taken = true, true
	return ho
}

// afterAcquire records an acquire's outcome: a lease of this locker holds
// the key until at least heldUntil, and the handoff ho (if the acquire
// took one) ends; a refused waiter's next watch goes first.
func (h *hub) afterAcquire(s *subscription, ho *handoff, ok bool, err error, heldUntil time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ok && h.subs[s.name] == s {
		s.held = heldUntil
	}
	if ho == nil || s.handoff != ho {
		return
	}
	s.endHandoff()
	switch {
	case ok:
	case err == nil:
		s.headReturn = true
		if ho.missed {
			h.wakeOne(s)
		}
	default:
		h.wakeOne(s)
	}
}

// releasing is called before a release of the lock record name is sent.
// It forgets that a lease of this locker holds the key (from then on a new
// watch reads the key), and when watches wait for the key, other acquires
// through the locker wait for the release's outcome: the key goes to the
// oldest watch, not to an acquire that reaches the server first.
func (h *hub) releasing(name string) {
	if h.nsubs.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.subs[name]; s != nil {
		s.held = time.Time{}
		if s.handoff == nil && slices.ContainsFunc(s.queue, func(sl *slot) bool { return sl.ghost.IsZero() }) {
			h.startHandoff(s, nil)
		}
	}
}

// unreleased is called after a release of the lock record name that did
// not end a lease (or failed): acquires no longer wait for it.
func (h *hub) unreleased(name string) {
	if h.nsubs.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.subs[name]; s != nil && s.handoff != nil && s.handoff.slot == nil {
		s.endHandoff()
	}
}

// extended records the outcome of an extend of the lock record name.
func (h *hub) extended(name string, ok bool, heldUntil time.Time) {
	if h.nsubs.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.subs[name]; s != nil {
		if ok {
			s.held = heldUntil
		} else {
			s.held = time.Time{}
		}
	}
}

// listener returns the listener of the node that holds name, starting it
// if need be.
func (h *hub) listener(ctx context.Context, name string) (*listener, error) {
	var (
		node    *redis.Client
		addr    string
		sharded bool
	)
	switch c := h.l.client.(type) {
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, name)
		if err != nil {
			return nil, err
		}
		node, addr, sharded = n, n.Options().Addr, true
	case *redis.Client:
		node = c
	default:
		return nil, errNoListener
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if lst := h.listeners[addr]; lst != nil {
		return lst, nil
	}
	if time.Now().Before(h.retryAt) {
		return nil, errNoListener
	}
	lst := &listener{h: h, addr: addr, sharded: sharded,
		subs: make(map[string]*subscription), unsubs: make(map[string]int), quit: make(chan struct{})}
	if sharded { // no I/O without channels
		lst.ps = node.SSubscribe(context.Background())
	} else {
		lst.ps = node.Subscribe(context.Background())
	}
	lst.rx.Store(time.Now().UnixNano())
	if h.listeners == nil {
		h.listeners = make(map[string]*listener)
		h.subs = make(map[string]*subscription)
	}
	h.listeners[addr] = lst
	go lst.receive()
	go lst.upkeep()
	return lst, nil
}

func (lst *listener) subscribe(ctx context.Context, channel string) error {
	if lst.sharded {
		return lst.ps.SSubscribe(ctx, channel)
	}
	return lst.ps.Subscribe(ctx, channel)
}

// receive reads the connection until it fails or is closed.
func (lst *listener) receive() {
	ctx := context.Background()
	for {
		msg, err := lst.ps.Receive(ctx)
		if err != nil {
			lst.fail()
			return
		}
		lst.rx.Store(time.Now().UnixNano())
		switch m := msg.(type) {
		case *redis.Message:
			lst.notify(m.Channel, m.Payload)
		case *redis.Subscription:
			lst.confirm(m)
		}
	}
}

// notify handles a message: the lease with the lock id id ended.
func (lst *listener) notify(channel, id string) {
	h := lst.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := lst.subs[channel]; s != nil {
		h.ended(s, id)
	}
}

// free wakes the oldest watch of s after a read found the key free,
// unless a lease of this locker has taken it since.
func (h *hub) free(s *subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Now().Before(s.held) {
		return
	}
	h.wakeOne(s)
}

// released handles the end of a lease through this locker (a release, or
// one that found the lease expired), before the release returns: the next
// watch is woken at once, and its handoff begins before the releasing
// goroutine can take the key again.
func (h *hub) released(name, id string) {
	if h.nsubs.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.subs[name]; s != nil {
		h.ended(s, id)
	}
}

// ended wakes the next watch of s for the end of the lease id, once
// whether the release or its message tells first. The caller holds h.mu.
func (h *hub) ended(s *subscription, id string) {
	s.held = time.Time{}
	if id != "" {
		if i := slices.Index(s.ended[:], id); i >= 0 {
			s.ended[i] = ""
			return
		}
		s.ended[s.next] = id
		s.next = (s.next + 1) % len(s.ended)
	}
	h.wakeOne(s)
}

// confirm handles a subscription's confirmation, and the end of one, which
// the listener asked for or the server decided (a cluster slot moved
// away: the watches of the channel are woken).
func (lst *listener) confirm(m *redis.Subscription) {
	h := lst.h
	h.mu.Lock()
	defer h.mu.Unlock()
	switch m.Kind {
	case "subscribe", "ssubscribe":
		lst.confirmed = true
		h.failures = 0
		if s := lst.subs[m.Channel]; s != nil && s.state == subPending {
			s.state = subOK
			close(s.ready)
		}
	case "unsubscribe", "sunsubscribe":
		if n := lst.unsubs[m.Channel]; n > 0 {
			if n == 1 {
				delete(lst.unsubs, m.Channel)
			} else {
				lst.unsubs[m.Channel] = n - 1
			}
			return
		}
		if s := lst.subs[m.Channel]; s != nil {
			h.forget(s)
		}
	}
}

// forget wakes s's watches, fails its setup if it is pending and removes
// it. The caller holds h.mu.
func (h *hub) forget(s *subscription) {
	h.wakeAll(s)
	if s.state == subPending {
		s.state = subFailed
		close(s.ready)
	}
	delete(s.lst.subs, s.name)
	if h.subs[s.name] == s {
		delete(h.subs, s.name)
		h.nsubs.Add(-1)
	}
}

// fail ends the listener after its connection failed (or it was closed):
// every watch is woken, since messages may have been lost, and the next
// Watch starts a new listener (after a pause if this one never got a
// subscription through).
func (lst *listener) fail() {
	h := lst.h
	h.mu.Lock()
	if lst.dead {
		h.mu.Unlock()
		return
	}
	lst.dead = true
	if h.listeners[lst.addr] == lst {
		delete(h.listeners, lst.addr)
	}
	if !lst.confirmed {
		h.failures++
		h.retryAt = time.Now().Add(min(retryMin<<min(h.failures-1, 10), retryMax))
	}
	for _, s := range lst.subs {
		h.forget(s)
	}
	close(lst.quit)
	h.mu.Unlock()
	_ = lst.ps.Close()
}

// upkeep unsubscribes channels that no watch has needed for a while, closes
// the listener once it has had no subscription for a while, and pings a
// silent connection (a dead one is failed).
func (lst *listener) upkeep() {
	t := time.NewTicker(housekeeping)
	defer t.Stop()
	for {
		select {
		case <-lst.quit:
			return
		case <-t.C:
		}
		if lst.unsubscribeIdle() {
			return
		}
		lst.ping()
	}
}

// unsubscribeIdle unsubscribes the channels that no watch has needed for
// unsubscribeAfter, or closes the listener when it has had none for
// closeAfter (then it reports true).
func (lst *listener) unsubscribeIdle() (closed bool) {
	h := lst.h
	lst.wmu.Lock()
	defer lst.wmu.Unlock()
	h.mu.Lock()
	if lst.dead {
		h.mu.Unlock()
		return true
	}
	now := time.Now()
	var idle []string
	for ch, s := range lst.subs {
		s.prune(now)
		if s.state == subOK && len(s.queue) == 0 && s.handoff == nil && now.Sub(s.used) >= unsubscribeAfter {
			idle = append(idle, ch)
			delete(lst.subs, ch)
			delete(h.subs, ch)
			h.nsubs.Add(-1)
			lst.unsubs[ch]++
		}
	}
	switch {
	case len(lst.subs) > 0:
		lst.empty = time.Time{}
	case lst.empty.IsZero():
		lst.empty = now
	case len(idle) == 0 && now.Sub(lst.empty) >= closeAfter:
		lst.dead = true
		if h.listeners[lst.addr] == lst {
			delete(h.listeners, lst.addr)
		}
		close(lst.quit)
		h.mu.Unlock()
		_ = lst.ps.Close()
		return true
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), watchSetup)
	defer cancel()
	for _, ch := range idle {
		// One channel a command: sharded channels of several slots cannot
		// share one.
		var err error
		if lst.sharded {
			err = lst.ps.SUnsubscribe(ctx, ch)
		} else {
			err = lst.ps.Unsubscribe(ctx, ch)
		}
		if err != nil {
			lst.fail()
			return true
		}
	}
	return false
}

// ping checks a connection that has been silent for pingAfter, and fails
// the listener when a ping went unanswered for pingTimeout.
func (lst *listener) ping() {
	now := time.Now()
	last := time.Unix(0, lst.rx.Load())
	switch {
	case now.Sub(last) < pingAfter:
		lst.pingSent = time.Time{}
	case lst.pingSent.IsZero() || last.After(lst.pingSent):
		lst.pingSent = now
		ctx, cancel := context.WithTimeout(context.Background(), watchSetup)
		err := lst.ps.Ping(ctx)
		cancel()
		if err != nil {
			lst.fail()
		}
	case now.Sub(lst.pingSent) >= pingTimeout:
		lst.fail()
	}
}
