package pgstore

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store/engine"
)

// Bounds of the listener's connection attempts, as [WithListenConn]
// documents them.
const (
	listenTimeout     = 10 * time.Second // one attempt: connect and LISTEN
	listenBackoffBase = 50 * time.Millisecond
	listenBackoffMax  = 5 * time.Second
	closeTimeout      = 5 * time.Second
)

// never is the channel of a watch that cannot fire. It is never closed.
var never = make(chan struct{})

func noop() {}

// Watch implements [store.Watcher] with LISTEN/NOTIFY on one connection
// ([WithListenConn]). It returns once LISTEN is active and the claim is
// marked as waited for (one UPDATE by the process's first watch of it:
// only marked claims notify). A store that cannot listen (no connection,
// a pgx.Tx) returns a channel that never closes.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	if s.lis == nil || engine.ValidateKey(key) != nil {
		return never, noop
	}
	return s.lis.watch(ctx, storedKey(key), s.mark)
}

// mark marks the claim on the stored key sk as waited for, and reports
// whether there is one.
func (s *Store) mark(ctx context.Context, sk string) (bool, error) {
	const op = "watch"
	var claimed bool
	err := retry(ctx, op, s.inTx, func(ctx context.Context, _ int) (bool, error) {
		return true, s.db.QueryRow(ctx, s.q.watched, sk).Scan(&claimed)
	})
	return claimed, err
}

// hijack returns the function that takes a connection out of pool for
// good, to listen on.
func hijack(pool *pgxpool.Pool) func(ctx context.Context) (*pgx.Conn, error) {
	return func(ctx context.Context) (*pgx.Conn, error) {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		return c.Hijack(), nil
	}
}

// listener is a store's one listening connection and the watches it
// serves, by stored key.
type listener struct {
	channel   string // the channel's name
	listenSQL string // LISTEN with the channel's quoted name
	connect   func(ctx context.Context) (*pgx.Conn, error)
	idle      time.Duration // how long it outlives its last watch
	logger    *slog.Logger

	mu         sync.Mutex
	run        *listenRun           // the running listener; nil when stopped
	connecting bool                 // the run is opening a connection
	settled    chan struct{}        // closed when that attempt ends
	watches    map[string]*keyWatch // the watched keys, by stored key
	pending    int                  // Watch calls not yet registered
	idleTimer  *time.Timer
}

// listenRun is one run of the listener, from its start to its stop.
type listenRun struct {
	ctx    context.Context // ended when the run stops
	cancel context.CancelFunc
}

// keyWatch is the one channel every watch of a key shares.
type keyWatch struct {
	ch      chan struct{} // closed when the key's claim may have ended
	fired   bool          // ch is closed
	n       int           // watches not yet stopped
	marked  bool          // the claim is marked as waited for
	marking chan struct{} // non-nil while a Watch marks it; closed when done
}

func newListener(channel string, connect func(ctx context.Context) (*pgx.Conn, error), idle time.Duration, logger *slog.Logger) *listener {
	return &listener{
		channel:   channel,
		listenSQL: "LISTEN " + pgx.Identifier{channel}.Sanitize(),
		connect:   connect,
		idle:      idle,
		logger:    logger,
		watches:   make(map[string]*keyWatch),
	}
}

// watch registers a watch of the stored key sk once the listener listens
// (or ctx ended), and marks its claim unless a watch here did.
func (l *listener) watch(ctx context.Context, sk string, mark func(ctx context.Context, sk string) (bool, error)) (<-chan struct{}, func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending++
	if l.run == nil {
		l.start()
	}
	for l.connecting && ctx.Err() == nil {
		settled := l.settled
		l.mu.Unlock()
		select {
		case <-settled:
		case <-ctx.Done():
		}
		l.mu.Lock()
	}
	w := l.watches[sk]
	if w == nil {
		w = &keyWatch{ch: make(chan struct{})}
		l.watches[sk] = w
	}
	w.n++
	l.pending--

	// The mark, made by one Watch of the key at a time; the others wait
	// for it, so that none returns before the claim notifies.
	for !w.marked && !w.fired && ctx.Err() == nil {
		if m := w.marking; m != nil {
			l.mu.Unlock()
			select {
			case <-m:
			case <-ctx.Done():
			}
			l.mu.Lock()
			continue
		}
		done := make(chan struct{})
		w.marking = done
		l.mu.Unlock()
		claimed, err := mark(ctx, sk)
		l.mu.Lock()
		w.marking = nil
		close(done)
		if err != nil {
			break // unmarked: the next Watch of the key tries again; this one polls
		}
		if !claimed {
			l.fire(sk, w) // the claim has ended already
			break
		}
		w.marked = true
	}

	stopped := false
	return w.ch, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if stopped {
			return
		}
		stopped = true
		w.n--
		if w.n == 0 && l.watches[sk] == w {
			delete(l.watches, sk)
		}
		l.idleCheck()
	}
}

// fire closes the channel of w, the watch of sk. l.mu is held.
func (l *listener) fire(sk string, w *keyWatch) {
	if !w.fired {
		w.fired = true
		close(w.ch)
	}
	if l.watches[sk] == w {
		delete(l.watches, sk)
	}
	l.idleCheck()
}

// wakeAll fires every watch. l.mu is held.
func (l *listener) wakeAll() {
	for sk, w := range l.watches {
		l.fire(sk, w)
	}
}

// start starts a run of the listener. l.mu is held.
func (l *listener) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r := &listenRun{ctx: ctx, cancel: cancel}
	l.run, l.connecting, l.settled = r, true, make(chan struct{})
	go l.loop(r)
}

// idleCheck arms the idle timer when no watch needs the listener. l.mu is
// held.
func (l *listener) idleCheck() {
	if l.run == nil || len(l.watches) > 0 || l.pending > 0 {
		return
	}
	if l.idleTimer == nil {
		l.idleTimer = time.AfterFunc(l.idle, l.idleStop)
	} else {
		l.idleTimer.Reset(l.idle)
	}
}

// idleStop stops the run when still no watch needs it.
func (l *listener) idleStop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.run == nil || len(l.watches) > 0 || l.pending > 0 {
		return
	}
	l.run.cancel()
	l.run, l.connecting = nil, false
}

// loop is a run: connect, listen, hand notifications to the watches, and
// again with back-off after a failure, until the run is stopped.
func (l *listener) loop(r *listenRun) {
	failures := 0
	for {
		conn, err := l.open(r.ctx)
		l.mu.Lock()
		if l.run != r {
			l.mu.Unlock()
			if conn != nil {
				l.close(conn)
			}
			return
		}
		l.connecting = false
		close(l.settled)
		if err == nil {
			// Notifications may have been lost while nothing listened.
			l.wakeAll()
		}
		l.mu.Unlock()
		if err == nil {
			if failures > 0 {
				l.logger.InfoContext(r.ctx, "pgstore: the notification listener is listening again")
			}
			failures = 0
			err = l.receive(r, conn)
			l.close(conn)
			if r.ctx.Err() != nil {
				return
			}
			l.logger.WarnContext(r.ctx, "pgstore: the notification listener lost its connection; waiting duplicates poll until it listens again",
				slog.Any("error", err))
		} else {
			if r.ctx.Err() != nil {
				return
			}
			if failures == 0 {
				l.logger.WarnContext(r.ctx, "pgstore: the notification listener cannot listen; waiting duplicates poll, and it tries again with back-off",
					slog.Any("error", err))
			}
		}
		failures++
		t := time.NewTimer(idemkit.Backoff{Base: listenBackoffBase, Max: listenBackoffMax}.Delay(failures))
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		l.mu.Lock()
		if l.run != r {
			l.mu.Unlock()
			return
		}
		l.connecting, l.settled = true, make(chan struct{})
		l.mu.Unlock()
	}
}

// open connects and listens, within listenTimeout.
func (l *listener) open(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, listenTimeout)
	defer cancel()
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, err
	}
	if conn == nil {
		return nil, errors.New("the listen connection function returned no connection")
	}
	// On the connection itself, past pgx's tracer: the store's own
	// upkeep, not one of its operations.
	if _, err := conn.PgConn().Exec(ctx, l.listenSQL).ReadAll(); err != nil {
		l.close(conn)
		return nil, err
	}
	return conn, nil
}

// receive hands the notifications that arrive on conn to the watches of
// their keys, until the connection fails or the run stops.
func (l *listener) receive(r *listenRun, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(r.ctx)
		if err != nil {
			return err
		}
		if n == nil || n.Channel != l.channel {
			continue
		}
		l.wake(n.Payload)
	}
}

// wake fires the watch of the stored key sk, if any.
func (l *listener) wake(sk string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.watches[sk]; w != nil {
		l.fire(sk, w)
	}
}

func (l *listener) close(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = conn.Close(ctx)
}
