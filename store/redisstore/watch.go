package redisstore

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/store/engine"
	"github.com/redis/go-redis/v9"
)

// A store's watches ride on one pub/sub connection per server: on a single
// node (or through Sentinel) one listener, on a cluster one per master
// that holds a watched key's slot. A listener is started by the first
// watch of a key it serves, subscribes to a key's channel while the key
// has watches (one subscription however many watch it) and unsubscribes
// when the last one stops; its connection is closed once it has served no
// watch for listenerIdle.
//
// A watch returns once the server has confirmed its subscription: the
// listener follows the subscription with a PING whose payload names it
// (a barrier), and the server answers commands in order, so the pong
// comes back only after the subscription is in place. go-redis reconnects
// the connection by itself after a failure; any failure the listener
// sees (a read or a write failing, a health-check ping unanswered) wakes
// every watch once, since messages may have been lost, and makes the next
// watch of each key subscribe and confirm again.

const (
	// listenerIdle is how long a listener keeps its connection without a
	// watch to serve before it closes it.
	listenerIdle = time.Minute
	// healthInterval is how long a listener waits for a message before it
	// pings the server, and then for the answer before it takes the
	// connection for dead (go-redis then reconnects).
	healthInterval = 3 * time.Second
	// writeTimeout bounds a listener's subscriptions and unsubscriptions
	// (and the dial, when the connection is down).
	writeTimeout = 10 * time.Second
	// setupPause is how long a listener answers watches with a channel
	// that never fires after it failed to subscribe.
	setupPause = time.Second
	// handoffWait is how long a watch woken by a release has to claim the
	// key before the next one is woken, and how long the store's other
	// claims of the key wait for it at most.
	handoffWait = 50 * time.Millisecond
	// ghostGrace is how long a watch stopped before it fired keeps its
	// place in the line for the next watch of the key.
	ghostGrace = 250 * time.Millisecond
)

// barrierPrefix starts the payload of a listener's barrier pings.
const barrierPrefix = "idemkit-watch:"

// neverFires is the channel of a watch that could not be set up: it never
// closes.
var neverFires = make(chan struct{})

func noop() {}

// watching holds a store's listeners, by the address of the server each
// listens to ("" on a single node).
type watching struct {
	idle, health time.Duration // listenerIdle and healthInterval, but in tests
	entries      atomic.Int64  // keys watched (or subscribed) in every listener

	mu        sync.Mutex
	listeners map[string]*listener
}

// Watch implements [store.Watcher]: the channel closes when the record
// under key is completed or deleted (the scripts publish in the same
// script: no round trip of its own), and once, spuriously, when the
// listener's connection failed. A release wakes the store's watches of
// the key in turn, oldest first: the oldest closes, and the next only
// once that one's waiter was refused the key or did not claim it within
// 50 ms (while it claims, the store's other claims of the key wait for
// it), so that one release sends one waiter to the server and a key
// claimed again at once by its releaser still goes round its waiters. A
// lease that runs out without a release notifies nobody: waiters poll.
//
// Watch returns once the server has confirmed the subscription, so a
// change made after it returns is never missed; the first watch of a key
// costs a round trip on the listener's connection. All watches of a store
// share one connection per server (per master on a cluster, sharded
// pub/sub). A watch that cannot be set up before ctx ends, or through a
// client other than a [*redis.Client] or [*redis.ClusterClient], returns
// a channel that never closes.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	if s.notify == "" || engine.ValidateKey(key) != nil || ctx.Err() != nil {
		return neverFires, noop
	}
	channel := s.redisKey(key)
	for range 3 { // the listener picked may be closing: take a new one
		l, err := s.listener(ctx, channel)
		if err != nil {
			return neverFires, noop
		}
		if ch, stop, ok := l.watch(ctx, channel); ok {
			return ch, stop
		}
	}
	return neverFires, noop
}

// listener returns the listener of the server that carries channel's
// notifications, started if there is none.
func (s *Store) listener(ctx context.Context, channel string) (*listener, error) {
	var (
		addr string
		node *redis.Client
	)
	switch c := s.client.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, channel)
		if err != nil {
			return nil, err
		}
		node, addr = n, n.Options().Addr
	}
	w := &s.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if l := w.listeners[addr]; l != nil {
		return l, nil
	}
	if w.listeners == nil {
		w.listeners = make(map[string]*listener)
	}
	l := newListener(w, addr, node, s.notify == "spublish")
	w.listeners[addr] = l
	go l.run()
	return l, nil
}

// remove forgets l if it is still addr's listener.
func (w *watching) remove(l *listener) {
	w.mu.Lock()
	if w.listeners[l.addr] == l {
		delete(w.listeners, l.addr)
	}
	w.mu.Unlock()
}

// listener is one pub/sub connection's watches.
type listener struct {
	owner        *watching
	addr         string
	ps           *redis.PubSub
	sharded      bool
	idle, health time.Duration

	// wmu orders the subscriptions and unsubscriptions written, so that
	// the server sees them in the order the keys' watches came and went,
	// and keeps each subscription and its barrier next to each other.
	wmu sync.Mutex

	mu       sync.Mutex
	closed   bool
	entries  map[string]*entry   // by channel: the keys watched or still subscribed
	barriers map[string]*barrier // by payload: the barriers not answered yet
	seq      uint64              // the last barrier's number
	gen      uint64              // bumped by every connection failure
	taint    bool                // an error reply came: the next barrier fails
	retryAt  time.Time           // no new setup before, after a failed one
	// unsubscribing counts, by channel, the unsubscriptions sent whose
	// confirmation has not come back; any other unsubscription is the
	// server's own (a cluster slot moved away).
	unsubscribing map[string]int
	unused        []*entry // entries whose last watch stopped, to unsubscribe
	sweeping      bool     // a goroutine unsubscribes the idle entries
	idleSince     time.Time
}

// entry is the watches of one key, which share its subscription.
type entry struct {
	name       string
	refs       int       // watches not stopped
	queue      []*slot   // the watches not fired, oldest first
	handoff    *handoff  // a watch woken by a release, about to claim
	held       time.Time // until then a claim of this store holds the key, unless released
	released   [8]string // the fences of the last releases that woke a watch, by the Release or its message
	subscribed bool      // subscribed since the last failure
	confirmed  bool      // a barrier after the subscription came back
	setup      *barrier  // the barrier under way, if any
}

// barrier is a ping that confirms an entry's subscription.
type barrier struct {
	token string
	e     *entry
	done  chan struct{} // closed when answered or failed
	ok    bool          // set before done closes
}

func newListener(owner *watching, addr string, node *redis.Client, sharded bool) *listener {
	return &listener{
		owner:         owner,
		addr:          addr,
		ps:            node.Subscribe(context.Background()), // no channel: no I/O
		sharded:       sharded,
		idle:          owner.idle,
		health:        owner.health,
		entries:       make(map[string]*entry),
		barriers:      make(map[string]*barrier),
		unsubscribing: make(map[string]int),
		idleSince:     time.Now(),
	}
}

// watch adds a watch of channel. ok is false when the listener is closed:
// take another.
func (l *listener) watch(ctx context.Context, name string) (ch <-chan struct{}, stop func(), ok bool) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, nil, false
	}
	e := l.entries[name]
	if e == nil {
		e = &entry{name: name}
		l.entries[name] = e
		l.owner.entries.Add(1)
	}
	e.refs++
	sl := e.enqueue()
	c := sl.ch
	var once sync.Once
	stop = func() { once.Do(func() { l.release(e, sl) }) }
	if e.confirmed {
		l.mu.Unlock()
		return c, stop, true
	}
	b := e.setup
	if b == nil {
		if time.Now().Before(l.retryAt) {
			// A setup failed a moment ago: poll rather than try again
			// at the pace of the waiters' claims.
			l.mu.Unlock()
			stop()
			return neverFires, noop, true
		}
		l.seq++
		b = &barrier{token: barrierPrefix + strconv.FormatUint(l.seq, 10), e: e, done: make(chan struct{})}
		e.setup = b
		l.barriers[b.token] = b
		// The writes do not take the caller's ctx: a write that ends
		// half-way makes go-redis drop the connection that every watch
		// shares.
		go l.setUp(e, b)
	}
	l.mu.Unlock()
	select {
	case <-b.done:
		if b.ok {
			return c, stop, true
		}
		select {
		case <-c: // a connection failure, which failed the barrier too
			return c, stop, true
		default:
		}
	case <-c:
		return c, stop, true
	case <-ctx.Done():
	}
	stop()
	return neverFires, noop, true
}

// setUp subscribes e's channel unless it is subscribed, and sends b right
// behind. A failure wakes every watch and holds new setups back for
// setupPause.
func (l *listener) setUp(e *entry, b *barrier) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	l.wmu.Lock()
	l.mu.Lock()
	if e.refs == 0 || l.entries[e.name] != e {
		// Every watch gave up before the setup's turn came: subscribing
		// now would leave a subscription nobody unsubscribes.
		if l.barriers[b.token] == b {
			delete(l.barriers, b.token)
			close(b.done)
		}
		if e.setup == b {
			e.setup = nil
		}
		l.mu.Unlock()
		l.wmu.Unlock()
		return
	}
	need, gen := !e.subscribed, l.gen
	l.mu.Unlock()
	var err error
	if need {
		if l.sharded {
			err = l.ps.SSubscribe(ctx, e.name)
		} else {
			err = l.ps.Subscribe(ctx, e.name)
		}
		if err == nil {
			l.mu.Lock()
			if l.gen == gen {
				e.subscribed = true
			}
			l.mu.Unlock()
		}
	}
	if err == nil {
		err = l.ps.Ping(ctx, b.token)
	}
	l.wmu.Unlock()
	if err != nil {
		l.mu.Lock()
		l.retryAt = time.Now().Add(setupPause)
		l.mu.Unlock()
		l.lost()
	}
}

// release ends the watch sl of e: a fired one claims its handoff (its
// waiter is about to claim the key), a waiting one leaves a ghost in its
// place. The last one queues e for unsubscription.
func (l *listener) release(e *entry, sl *slot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !sl.fired {
		sl.ghost = time.Now().Add(ghostGrace)
	} else if ho := e.handoff; ho != nil && ho.slot == sl {
		ho.claimed = true
	}
	e.refs--
	if e.refs > 0 || l.closed || l.entries[e.name] != e {
		return
	}
	l.unused = append(l.unused, e)
	if !l.sweeping {
		l.sweeping = true
		go l.sweep()
	}
}

// sweep unsubscribes the entries whose watches have all stopped, unless a
// new watch took them up meanwhile.
func (l *listener) sweep() {
	for {
		l.wmu.Lock()
		l.mu.Lock()
		var names []string
		for _, e := range l.unused {
			if e.refs == 0 && l.entries[e.name] == e {
				delete(l.entries, e.name)
				l.owner.entries.Add(-1)
				e.fireAll()
				l.unsubscribing[e.name]++
				names = append(names, e.name)
			}
		}
		clear(l.unused)
		l.unused = l.unused[:0]
		if len(names) == 0 || l.closed {
			l.sweeping = false
			if len(l.entries) == 0 {
				l.idleSince = time.Now()
			}
			l.mu.Unlock()
			l.wmu.Unlock()
			return
		}
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		var failed error
		for _, name := range names { // one by one: a cluster takes one slot a command
			var err error
			if l.sharded {
				err = l.ps.SUnsubscribe(ctx, name)
			} else {
				err = l.ps.Unsubscribe(ctx, name)
			}
			if err != nil && failed == nil {
				failed = err
			}
		}
		cancel()
		l.wmu.Unlock()
		if failed != nil {
			l.lost()
		}
	}
}

// run reads the connection until the client or the listener is closed.
func (l *listener) run() {
	ctx := context.Background()
	pinged := false // a health-check ping is out
	failures := 0
	for {
		var (
			msg any
			err error
		)
		if pinged {
			// A read that times out now is a failure: go-redis drops the
			// connection and dials a new one.
			rctx, cancel := context.WithTimeout(ctx, l.health)
			msg, err = l.ps.Receive(rctx)
			cancel()
		} else {
			msg, err = l.ps.ReceiveTimeout(ctx, l.health)
		}
		var rerr redis.Error
		switch {
		case err == nil:
			pinged, failures = false, 0
			l.dispatch(msg)
		case errors.Is(err, redis.ErrClosed):
			l.end()
			return
		case !pinged && timeout(err):
			failures = 0
			if l.closeIfIdle() {
				return
			}
			if err := l.ps.Ping(ctx); err != nil {
				l.lost()
			} else {
				pinged = true
			}
		case errors.As(err, &rerr):
			// The server refused a command; the connection is fine.
			pinged, failures = false, 0
			l.refused(rerr)
		default:
			pinged = false
			l.lost()
			if l.closeIfIdle() {
				return
			}
			if failures++; failures > 1 {
				time.Sleep(min(25*time.Millisecond<<min(failures, 6), time.Second))
			}
		}
	}
}

// timeout reports whether err is a read that timed out.
func timeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// dispatch handles a message from the server.
func (l *listener) dispatch(msg any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch m := msg.(type) {
	case *redis.Message:
		e := l.entries[m.Channel]
		switch fence, ok := strings.CutPrefix(m.Payload, "release "); {
		case e == nil:
		case !ok:
			e.fireAll()
		default:
			l.releasedOnce(e, fence)
		}
	case *redis.Pong:
		if b := l.barriers[m.Payload]; b != nil {
			delete(l.barriers, m.Payload)
			ok := !l.taint
			l.taint = false
			if b.e.setup == b {
				b.e.setup = nil
				if ok {
					b.e.confirmed = true
				} else {
					b.e.subscribed = false // subscribe again next time
				}
			}
			b.ok = ok
			close(b.done)
		}
	case *redis.Subscription:
		if m.Kind != "unsubscribe" && m.Kind != "sunsubscribe" {
			return
		}
		if n := l.unsubscribing[m.Channel]; n > 0 {
			if n == 1 {
				delete(l.unsubscribing, m.Channel)
			} else {
				l.unsubscribing[m.Channel] = n - 1
			}
			return
		}
		// The server dropped the subscription by itself (on a cluster,
		// the slot moved away): wake the key's watches, whose next watch
		// subscribes again.
		if e := l.entries[m.Channel]; e != nil {
			e.fireAll()
			e.confirmed, e.subscribed = false, false
		}
	}
}

// refused handles an error reply: the next barrier to come back fails,
// since the error may be its subscription's. A cross-slot error is
// go-redis resubscribing a cluster shard's channels in one command after
// a reconnection; the listener subscribes them again one by one.
func (l *listener) refused(err redis.Error) {
	if strings.HasPrefix(err.Error(), "CROSSSLOT") {
		return
	}
	l.mu.Lock()
	l.taint = len(l.barriers) > 0
	l.mu.Unlock()
}

// lost handles a connection failure: every watch wakes, every barrier
// fails, and every key must subscribe and confirm again.
func (l *listener) lost() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gen++
	l.taint = false
	clear(l.unsubscribing)
	for _, e := range l.entries {
		e.fireAll()
		e.confirmed, e.subscribed, e.setup = false, false, nil
	}
	for token, b := range l.barriers {
		delete(l.barriers, token)
		close(b.done)
	}
}

// closeIfIdle closes the listener when it has served no watch for its
// idle time, and reports whether it did.
func (l *listener) closeIfIdle() bool {
	l.owner.mu.Lock()
	l.mu.Lock()
	idle := len(l.entries) == 0 && len(l.barriers) == 0 && !l.sweeping && time.Since(l.idleSince) >= l.idle
	if idle {
		l.closed = true
		if l.owner.listeners[l.addr] == l {
			delete(l.owner.listeners, l.addr)
		}
	}
	l.mu.Unlock()
	l.owner.mu.Unlock()
	if idle {
		_ = l.ps.Close()
	}
	return idle
}

// end closes the listener after its client was closed: every watch wakes.
func (l *listener) end() {
	l.owner.remove(l)
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.lost()
	_ = l.ps.Close()
}
