package pglock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// Listener timing.
const (
	// watchSetup bounds how long Watch waits for the listening connection
	// to come up: a waiter whose watch is not in place by then polls, and
	// is woken when the listener comes up.
	watchSetup = time.Second

	// listenCheck is how often the listener, when no notification arrives,
	// checks its connection (it sends LISTEN again) and whether any watch
	// still needs it: one that had no watch for a whole interval stops.
	listenCheck = 10 * time.Second

	// listenConnect bounds one attempt to get the listening connection
	// from the pool and LISTEN on it.
	listenConnect = 5 * time.Second
)

// listenBackoff spaces the attempts to reconnect the listener after a
// failed one: from 100ms, doubling, jittered, at most 5s.
func listenBackoff() idemkit.Backoff {
	return idemkit.Backoff{Base: 100 * time.Millisecond, Max: 5 * time.Second}
}

// maxChannelBytes is the longest notification channel name PostgreSQL
// accepts.
const maxChannelBytes = 63

// channel is the notification channel of the table: its name as [WithTable]
// spells it ("table" or "schema.table"), or, when that is longer than
// PostgreSQL's 63-byte limit, its first 46 bytes, "#" and 16 hex digits of
// its SHA-256. Releases notify on it, with the row's key as payload.
func (n tableName) channel() string {
	name := n.table
	if n.schema != "" {
		name = n.schema + "." + n.table
	}
	if len(name) <= maxChannelBytes {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:maxChannelBytes-17] + "#" + hex.EncodeToString(sum[:8])
}

// connPool is a [DB] that can spare the listening connection: a pool
// (*pgxpool.Pool) lends one for good. The pool's own hooks (BeforeConnect,
// AfterConnect, ...) apply to it.
type connPool interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

// connConfig is a [DB] whose settings a second connection can be opened
// with: a *pgx.Conn.
type connConfig interface {
	Config() *pgx.ConnConfig
}

// listenConn returns how the locker on db gets its listening
// connection, or nil when db cannot spare one: a caller's pgx.Tx (whose
// reads, and so the watch's, run inside the caller's transaction), or
// another implementation of [DB].
func listenConn(db DB) func(ctx context.Context) (*pgx.Conn, error) {
	switch db := db.(type) {
	case pgx.Tx:
		return nil
	case connPool:
		return func(ctx context.Context) (*pgx.Conn, error) {
			c, err := db.Acquire(ctx)
			if err != nil {
				return nil, err
			}
			return c.Hijack(), nil
		}
	case connConfig:
		cfg := db.Config()
		return func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cfg.Copy()) }
	}
	return nil
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

// Watch implements [lock.Watcher]: the channel closes when a release of key
// commits (the release statement itself sends the notification, on the
// table's channel, in its own transaction), at once when key holds no
// live lease, and when the lease it found runs out by the server clock
// (expiry sends no notification, so the watch keeps its own timer). It may
// also close spuriously: after the listening connection was lost and came
// back, every watch fires once, since a notification may have been lost.
//
// Every watch of the locker shares one listening connection, started when
// the first watch needs it and closed once no watch has needed it for
// about 10 s: on a *pgxpool.Pool, a connection taken from the pool for
// good (the pool's hooks apply to it); on a *pgx.Conn, a second connection
// opened with its settings. A lost connection is replaced at once, then
// with a back-off from 100ms to 5s. A locker on a pgx.Tx (or on another
// implementation of [DB]) does not listen: its watches never fire, and
// [lock.Do] waits by its back-off alone.
//
// Watch returns once the watch is in place: it waits (at most a second)
// for the listener to LISTEN, then reads key under ctx, so that a release
// committed before the watch was in place is not missed. Watches of one
// key registered while such a read is in flight share the next read: a
// hot key's waiters, woken together, cost two reads, not one each. A
// watch that could not be set up in time, or whose read failed, still
// fires on a notification or when the listener comes up, and the waiter's
// back-off still runs: a lost notification delays it by its back-off, no
// more.
func (l *Locker) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return closedChan(), func() {}
	}
	n := l.notes
	if n == nil {
		return never, func() {}
	}
	sk, _ := storageKey(key)
	w, up, settled := n.add(sk)
	stop := func() { n.remove(sk, w) }
	if !up {
		if settled == nil {
			return w.ch, stop // the listener is failing: it wakes w when it comes up
		}
		t := time.NewTimer(watchSetup)
		select {
		case <-settled:
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		if !n.arm(w) {
			return w.ch, stop // not up yet: it wakes w when it comes up
		}
	}
	// The listener is up, so a release that commits from now on notifies
	// w. A read sent from now on finds out whether the key is held now.
	n.check(ctx, sk, w, func(ctx context.Context) (time.Duration, bool, error) {
		var remaining int64
		err := l.db.QueryRow(ctx, l.q.watch, sk).Scan(&remaining)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return 0, false, nil
		case err != nil:
			l.cfg.logger.DebugContext(ctx, "pglock: a watch could not read its key; the waiter polls",
				slog.String("code", idemkit.CodeOf(mapError(ctx, "watch", err)).String()))
			return 0, false, err
		}
		return time.Duration(remaining) * time.Microsecond, true, nil
	})
	return w.ch, stop
}

// waiter is one watch: its channel closes once. The notifier's mu guards
// its other fields.
type waiter struct {
	ch    chan struct{}
	once  sync.Once
	early bool        // its Watch waits for the listener to come up, then reads the key itself
	timer *time.Timer // fires at the expiry of the lease its key's read found
}

func (w *waiter) wake() { w.once.Do(func() { close(w.ch) }) }

// watched is the watches of one storage key and the reads that tell them
// whether the key is held.
type watched struct {
	waiters  map[*waiter]struct{}
	pending  *keyRead // the next read: not sent yet, joined by every watch registered since
	inflight *keyRead // the read sent, if any
}

// has reports whether w watches the key.
func (kw *watched) has(w *waiter) bool {
	_, ok := kw.waiters[w]
	return ok
}

// keyRead is a read of a key that settles the watches registered before
// it was sent.
type keyRead struct {
	members []*waiter
	sent    bool
	done    chan struct{} // closed once its result was applied
}

// notifier is a locker's listening side: one connection that LISTENs on
// the table's channel, shared by every watch, with an in-process fan-out
// from each notification's key to the watches of that key.
type notifier struct {
	connect func(ctx context.Context) (*pgx.Conn, error) // a connection of its own
	listen  string                                       // the LISTEN statement
	logger  *slog.Logger

	mu      sync.Mutex
	keys    map[string]*watched // storage key → its watches
	watches uint64              // Watch calls so far
	running bool                // the listener goroutine runs
	up      bool                // it LISTENs
	failing bool                // its last attempt to connect failed
	settled chan struct{}       // closed when the attempt to connect in progress ends; nil between attempts
	pid     uint32              // the listening backend's process id, for tests
}

func newNotifier(connect func(ctx context.Context) (*pgx.Conn, error), channel string, logger *slog.Logger) *notifier {
	return &notifier{
		connect: connect,
		listen:  "LISTEN " + pgx.Identifier{channel}.Sanitize(),
		logger:  logger,
		keys:    make(map[string]*watched),
	}
}

// add registers a watch of the storage key sk and starts the listener if
// it is not running. It reports whether the listener is up and, if it is
// not, the channel that closes when its attempt to connect ends (nil when
// it is failing: the caller does not wait, the listener wakes the watch
// when it comes up).
func (n *notifier) add(sk string) (w *waiter, up bool, settled chan struct{}) {
	w = &waiter{ch: make(chan struct{})}
	n.mu.Lock()
	defer n.mu.Unlock()
	kw := n.keys[sk]
	if kw == nil {
		kw = &watched{waiters: make(map[*waiter]struct{})}
		n.keys[sk] = kw
	}
	kw.waiters[w] = struct{}{}
	n.watches++
	if !n.running {
		n.running = true
		n.settled = make(chan struct{})
		go n.run()
	}
	if n.up || n.failing {
		return w, n.up, nil
	}
	w.early = true
	return w, false, n.settled
}

// arm ends the wait of w's Watch for the listener: it reports whether the
// listener is up (the Watch then reads the key itself); if not, the
// listener wakes w when it comes up.
func (n *notifier) arm(w *waiter) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	w.early = false
	return n.up
}

// check settles the watch w of sk by a read sent after w was registered:
// the key's pending read, which w joins. The first of its members to find
// no read of the key in flight sends it (under its own ctx), and applies
// its result to every member still watching: a free key wakes them, a
// held one gives each a timer for its expiry. check returns once the
// result is applied or ctx ends.
func (n *notifier) check(ctx context.Context, sk string, w *waiter, read func(ctx context.Context) (time.Duration, bool, error)) {
	n.mu.Lock()
	kw := n.keys[sk]
	if kw == nil || !kw.has(w) {
		n.mu.Unlock()
		return
	}
	r := kw.pending
	if r == nil {
		r = &keyRead{done: make(chan struct{})}
		kw.pending = r
	}
	r.members = append(r.members, w)
	for !r.sent && kw.inflight != nil {
		prev := kw.inflight.done
		n.mu.Unlock()
		select {
		case <-prev:
		case <-ctx.Done():
			n.mu.Lock()
			if !r.sent { // another member, or the next watch of sk, sends r
				r.members = slices.DeleteFunc(r.members, func(m *waiter) bool { return m == w })
				if len(r.members) == 0 && kw.pending == r {
					kw.pending = nil
					n.drop(sk, kw)
				}
			}
			n.mu.Unlock()
			return
		}
		n.mu.Lock()
	}
	if r.sent {
		n.mu.Unlock()
		select {
		case <-r.done:
		case <-ctx.Done():
		}
		return
	}
	kw.pending, r.sent = nil, true
	if !slices.ContainsFunc(r.members, kw.has) {
		close(r.done) // every member was woken or stopped meanwhile: nothing to read
		n.drop(sk, kw)
		n.mu.Unlock()
		return
	}
	kw.inflight = r
	n.mu.Unlock()

	remaining, held, err := read(ctx)

	n.mu.Lock()
	defer n.mu.Unlock()
	kw.inflight = nil
	for _, m := range r.members {
		if !kw.has(m) || err != nil {
			continue // woken or stopped meanwhile; or unsettled: the poll covers it
		}
		if !held {
			m.wake()
			delete(kw.waiters, m)
		} else if m.timer == nil {
			// Expiry sends no notification: fire when the lease runs out.
			m.timer = time.AfterFunc(remaining, m.wake)
		}
	}
	close(r.done)
	n.drop(sk, kw)
}

// drop forgets the key sk when nothing watches or reads it any more. The
// caller holds mu.
func (n *notifier) drop(sk string, kw *watched) {
	if len(kw.waiters) == 0 && kw.pending == nil && kw.inflight == nil && n.keys[sk] == kw {
		delete(n.keys, sk)
	}
}

// remove ends the watch w of sk.
func (n *notifier) remove(sk string, w *waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
	if kw := n.keys[sk]; kw != nil {
		delete(kw.waiters, w)
		n.drop(sk, kw)
	}
}

// dispatch wakes every watch of the storage key sk.
func (n *notifier) dispatch(sk string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if kw := n.keys[sk]; kw != nil {
		for w := range kw.waiters {
			w.wake()
		}
		clear(kw.waiters)
		n.drop(sk, kw)
	}
}

// wakeAll wakes every watch but the early ones (when all is false): those
// registered while no listener was up, or every watch after the listener
// was lost, since a notification may have been lost with it. The caller
// holds mu.
func (n *notifier) wakeAll(all bool) {
	for sk, kw := range n.keys {
		for w := range kw.waiters {
			if all || !w.early {
				w.wake()
				delete(kw.waiters, w)
			}
		}
		n.drop(sk, kw)
	}
}

// errIdle ends serve when no watch needs the listener.
var errIdle = errors.New("pglock: the listener is idle")

// run is the listener: it connects, LISTENs and serves notifications
// until no watch needs it, reconnecting after a failure.
func (n *notifier) run() {
	fails := 0
	for {
		conn, err := n.dial()
		n.mu.Lock()
		close(n.settled)
		n.settled = nil
		if err != nil {
			fails++
			n.failing = true
			if len(n.keys) == 0 {
				n.running = false // the next watch tries again
				n.mu.Unlock()
				return
			}
			n.mu.Unlock()
			n.logger.Debug("pglock: the listening connection could not be set up; waiters poll",
				slog.String("code", idemkit.CodeOf(mapError(context.Background(), "listen", err)).String()))
			time.Sleep(listenBackoff().Delay(fails))
			n.mu.Lock()
			n.settled = make(chan struct{})
			n.mu.Unlock()
			continue
		}
		fails = 0
		n.up, n.failing, n.pid = true, false, conn.PgConn().PID()
		n.wakeAll(false)
		n.mu.Unlock()

		err = n.serve(conn)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(ctx)
		cancel()
		if errors.Is(err, errIdle) {
			return
		}
		n.mu.Lock()
		n.up = false
		n.wakeAll(true)
		n.settled = make(chan struct{})
		n.mu.Unlock()
		n.logger.Warn("pglock: the listening connection was lost; reconnecting",
			slog.String("code", idemkit.CodeOf(mapError(context.Background(), "listen", err)).String()))
	}
}

// dial gets a connection of its own and LISTENs on it.
func (n *notifier) dial() (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), listenConnect)
	defer cancel()
	conn, err := n.connect(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, n.listen); err != nil {
		_ = conn.Close(ctx)
		return nil, err
	}
	return conn, nil
}

// serve dispatches the notifications that arrive on conn. Every
// listenCheck without one, it stops (errIdle, having marked the listener
// stopped) if no watch needed it since the last check, and otherwise sends
// LISTEN again to check the connection. It returns the connection's
// failure.
func (n *notifier) serve(conn *pgx.Conn) error {
	n.mu.Lock()
	seen := n.watches
	n.mu.Unlock()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), listenCheck)
		note, err := conn.WaitForNotification(ctx)
		cancel()
		switch {
		case err == nil && note == nil:
			// The pool's own notification handler took it: the key is
			// unknown, so every watch fires.
			n.mu.Lock()
			n.wakeAll(false)
			n.mu.Unlock()
			continue
		case err == nil:
			n.dispatch(note.Payload)
			continue
		case !errors.Is(err, context.DeadlineExceeded) || conn.IsClosed():
			return err
		}
		n.mu.Lock()
		if len(n.keys) == 0 && n.watches == seen {
			n.up, n.running = false, false
			n.mu.Unlock()
			return errIdle
		}
		seen = n.watches
		n.mu.Unlock()
		ctx, cancel = context.WithTimeout(context.Background(), listenCheck)
		_, err = conn.Exec(ctx, n.listen)
		cancel()
		if err != nil {
			return err
		}
	}
}
