package pglock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
)

// hourly is a back-off that never runs out during a test: a waiter built
// with it gets the lock within the test only if a watch wakes it.
var hourly = []lock.Option{lock.WithBackoff(idemkit.Backoff{Base: time.Hour, Max: time.Hour}), lock.WithTimeout(time.Hour)}

// spy is a locker whose watches report, once they are in place, that a
// waiter sleeps on them: after such a report, a release is announced to
// the waiter only by a notification.
type spy struct {
	*Locker
	armed   chan string  // a watch on the key is in place: the listener was up and the key held
	watches atomic.Int32 // Watch calls
}

func newSpy(l *Locker) *spy { return &spy{Locker: l, armed: make(chan string, 4096)} }

func (s *spy) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	ch, stop := s.Locker.Watch(ctx, key)
	s.watches.Add(1)
	// A watch registered while the listener was down is woken when it
	// comes up; so a channel still open once the listener is up is armed.
	up := s.notes.isUp()
	select {
	case <-ch:
	default:
		if up {
			s.armed <- key
		}
	}
	return ch, stop
}

// isUp reports whether the listener LISTENs.
func (n *notifier) isUp() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.up
}

// backend returns the listening backend's process id.
func (n *notifier) backend() uint32 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pid
}

// await waits until cond holds, checking every few milliseconds, and fails
// the test if its ctx ends first.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-t.Context().Done():
			t.Fatalf("gave up waiting until %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// receive returns the next value of ch, failing the test if its ctx ends
// first.
func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-t.Context().Done():
		t.Fatalf("gave up waiting for %s", what)
		panic("unreachable")
	}
}

// listening counts the server's backends that LISTEN on l's channel.
func listening(t *testing.T, admin *pgxpool.Pool, l *Locker) int {
	t.Helper()
	var n int
	if err := admin.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE query = $1", l.notes.listen).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor runs lock.Do on key through l in a goroutine of its own and
// returns the channel of its result and of the lease it got.
func waitFor(ctx context.Context, l lock.Locker, key string, opts ...lock.Option) (<-chan error, <-chan lock.Lease) {
	errs, leases := make(chan error, 1), make(chan lock.Lease, 1)
	go func() {
		errs <- lock.Do(ctx, l, key, func(_ context.Context, lease lock.Lease) error {
			leases <- lease
			return nil
		}, opts...)
	}()
	return errs, leases
}

// TestWatchWakesDo: a lock.Do waiter whose back-off is an hour gets the
// lock as soon as another client releases it: only the release's
// notification can wake it within the test. On a pool, and on a single
// connection (the locker opens its listening connection with the same
// settings).
func TestWatchWakesDo(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	for _, c := range []struct {
		name string
		db   func(t *testing.T) DB
	}{
		{"pool", func(t *testing.T) DB { return newPool(t, srv.URL, 4) }},
		{"conn", func(t *testing.T) DB { return connect(t, srv.URL) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			opts := tables(t, admin)
			l, err := New(c.db(t), opts...)
			if err != nil {
				t.Fatal(err)
			}
			holder, err := New(newPool(t, srv.URL, 2), opts...) // another client
			if err != nil {
				t.Fatal(err)
			}
			held := acquireOK(t, holder, "k", time.Minute)
			s := newSpy(l)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			errs, leases := waitFor(ctx, s, "k", hourly...)
			receive(t, "the waiter's watch", s.armed)
			released := time.Now()
			if out, err := holder.ReleaseKey(ctx, held.Key, held.ID); err != nil || !out.OK {
				t.Fatalf("release: %+v, %v", out, err)
			}
			if err := <-errs; err != nil {
				t.Fatalf("Do with an hour's back-off was not woken by the release: %v", err)
			}
			got := <-leases
			if got.Fence <= held.Fence {
				t.Fatalf("the waiter's fence %v does not follow the holder's %v", got.Fence, held.Fence)
			}
			t.Logf("the waiter held the lock %v after the release was sent", time.Since(released))
			if n := listening(t, admin, l); n != 1 {
				t.Fatalf("%d listening backends; want 1", n)
			}
		})
	}
}

// TestWatchFiresAtExpiry: a lease that runs out sends no notification, but
// the watch knows its expiry: a waiter with an hour's back-off gets a lock
// abandoned by its holder once it expires.
func TestWatchFiresAtExpiry(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opts := tables(t, admin)
	l, err := New(newPool(t, srv.URL, 4), opts...)
	if err != nil {
		t.Fatal(err)
	}
	held := acquireOK(t, l, "k", time.Second) // never released
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	errs, leases := waitFor(ctx, l, "k", hourly...)
	if err := <-errs; err != nil {
		t.Fatalf("Do with an hour's back-off did not get the expired lock: %v", err)
	}
	if got := <-leases; got.AcquiredAt.Before(held.ExpiresAt) || got.Fence <= held.Fence {
		t.Fatalf("the waiter's lease %v (acquired %v) does not follow the expired %v (expired %v)",
			got.Fence, got.AcquiredAt, held.Fence, held.ExpiresAt)
	}
}

// TestWatchListenerKilled terminates the listening backend and keeps the
// listener from reconnecting: a waiter with a short back-off still gets
// the lock, by polling, although the release's notification had no one to
// reach. Once the server takes the listener again, it reconnects (a new
// backend) and a waiter with an hour's back-off is woken by notification
// again.
func TestWatchListenerKilled(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opts := tables(t, admin)
	l, err := New(newPool(t, srv.URL, 4), opts...)
	if err != nil {
		t.Fatal(err)
	}
	var refusing atomic.Bool
	var refused atomic.Int32
	connect := l.notes.connect
	l.notes.connect = func(ctx context.Context) (*pgx.Conn, error) {
		if refusing.Load() {
			refused.Add(1)
			return nil, errors.New("test: the listener is refused")
		}
		return connect(ctx)
	}
	holder, err := New(newPool(t, srv.URL, 2), opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s := newSpy(l)

	// The listener comes up with a first watch.
	acquireOK(t, holder, "a", time.Minute)
	await(t, "the listener comes up", func() bool {
		_, stop := l.Watch(ctx, "a")
		stop()
		return l.notes.isUp()
	})
	pid := l.notes.backend()

	// Kill it, and refuse its reconnection.
	refusing.Store(true)
	var killed bool
	if err := admin.QueryRow(ctx, "SELECT pg_terminate_backend($1)", int32(pid)).Scan(&killed); err != nil || !killed {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, killed, err)
	}
	await(t, "the listener notices it was killed", func() bool { return !l.notes.isUp() })

	held := acquireOK(t, holder, "b", time.Minute)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	watches := s.watches.Load()
	errs, _ := waitFor(wctx, s, "b", lock.WithBackoff(idemkit.Backoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}), lock.WithTimeout(30*time.Second))
	await(t, "the waiter waits", func() bool { return s.watches.Load() > watches })
	if out, err := holder.ReleaseKey(ctx, held.Key, held.ID); err != nil || !out.OK {
		t.Fatalf("release: %+v, %v", out, err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("without a listener, the waiter did not get the lock by polling: %v", err)
	}
	if l.notes.isUp() || refused.Load() == 0 {
		t.Fatalf("the listener was up (%v) or never refused (%d tries)", l.notes.isUp(), refused.Load())
	}

	// The listener reconnects, on a new backend, and wakes waiters again.
	refusing.Store(false)
	held = acquireOK(t, holder, "c", time.Minute)
	errs, _ = waitFor(wctx, s, "c", hourly...)
	receive(t, "the waiter's watch", s.armed)
	if out, err := holder.ReleaseKey(ctx, held.Key, held.ID); err != nil || !out.OK {
		t.Fatalf("release: %+v, %v", out, err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("after the listener reconnected, Do with an hour's back-off was not woken: %v", err)
	}
	if next := l.notes.backend(); next == pid {
		t.Fatalf("the listener still reports the killed backend %d", pid)
	}
	if n := listening(t, admin, l); n != 1 {
		t.Fatalf("%d listening backends after the reconnection; want 1", n)
	}
}

// TestWatchOneListener parks 1000 lock.Do waiters, each on a key of its
// own held by another client, with an hour's back-off: the locker listens
// on one connection however many wait, and every waiter gets its lock
// once the holder releases them all.
func TestWatchOneListener(t *testing.T) {
	t.Parallel()
	const waiters = 1000
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opts := tables(t, admin)
	l, err := New(newPool(t, srv.URL, 16), opts...)
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int32
	connect := l.notes.connect
	l.notes.connect = func(ctx context.Context) (*pgx.Conn, error) {
		dials.Add(1)
		return connect(ctx)
	}
	holder, err := New(newPool(t, srv.URL, 8), opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	held := make([]lock.Lease, waiters)
	parallel(t, waiters, 8, func(i int) error {
		lease, ok, err := holder.Acquire(ctx, fmt.Sprintf("k/%d", i), time.Hour)
		if err == nil && !ok {
			err = errors.New("locked")
		}
		held[i] = lease
		return err
	})

	s := newSpy(l)
	var armed sync.Map
	var wg sync.WaitGroup
	failures := make(chan error, waiters)
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs, _ := waitFor(ctx, s, fmt.Sprintf("k/%d", i), hourly...)
			if err := <-errs; err != nil {
				failures <- err
			}
		}()
	}
	for n := 0; n < waiters; {
		if _, seen := armed.LoadOrStore(receive(t, "the waiters' watches", s.armed), true); !seen {
			n++
		}
	}
	if n := listening(t, admin, l); n != 1 {
		t.Fatalf("%d listening backends with %d waiters; want 1", n, waiters)
	}
	parallel(t, waiters, 8, func(i int) error {
		out, err := holder.ReleaseKey(ctx, held[i].Key, held[i].ID)
		if err == nil && !out.OK {
			err = fmt.Errorf("release: %+v", out)
		}
		return err
	})
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Fatalf("a waiter with an hour's back-off was not woken: %v", err)
	}
	if n := listening(t, admin, l); n != 1 {
		t.Fatalf("%d listening backends after the waiters left; want 1", n)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d listening connections opened; want 1", n)
	}
}

// parallel runs f(0) … f(n-1) on workers goroutines and fails the test on
// the first error.
func parallel(t *testing.T, n, workers int, f func(i int) error) {
	t.Helper()
	var next atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestWatchWithoutListener: a locker inside a caller's transaction cannot
// spare a listening connection; its watches never fire, and waiters keep
// polling.
func TestWatchWithoutListener(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opts := tables(t, admin)
	tx, err := connect(t, srv.URL).Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	l, err := New(tx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if l.notes != nil {
		t.Fatal("a locker in a transaction has a listener")
	}
	ch, stop := l.Watch(t.Context(), "free")
	defer stop()
	select {
	case <-ch:
		t.Fatal("the watch of a locker without a listener fired")
	default:
	}
	ch, _ = l.Watch(t.Context(), "")
	if _, open := <-ch; open {
		t.Fatal("the watch of an invalid key did not fire")
	}
}

// TestWatchFreeKey: the watch of a key that holds no live lease fires at
// once, so a release committed before the watch was in place is not
// missed.
func TestWatchFreeKey(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	l, err := New(newPool(t, srv.URL, 2), tables(t, admin)...)
	if err != nil {
		t.Fatal(err)
	}
	lease := acquireOK(t, l, "k", time.Minute)
	if out, err := l.Release(t.Context(), lease.ID); err != nil || !out.OK {
		t.Fatalf("release: %+v, %v", out, err)
	}
	ch, stop := l.Watch(t.Context(), "k")
	defer stop()
	receive(t, "the watch of a free key", ch)
}

// TestChannel: the notification channel is the table's name, shortened
// to PostgreSQL's limit with a hash when it is longer.
func TestChannel(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		table string
		want  string
	}{
		{"idemkit_locks", "idemkit_locks"},
		{"app.Locks", "app.Locks"},
	} {
		n, err := parseTableName(c.table)
		if err != nil {
			t.Fatal(err)
		}
		if got := n.channel(); got != c.want {
			t.Errorf("channel of %q = %q; want %q", c.table, got, c.want)
		}
	}
	long := func(schema string) string {
		n, err := parseTableName(schema + "." + "t2345678901234567890123456789012345678901234567")
		if err != nil {
			t.Fatal(err)
		}
		return n.channel()
	}
	a, b := long("s234567890123456789012345678901234567890123456789012345678901a"), long("s234567890123456789012345678901234567890123456789012345678901b")
	if len(a) != maxChannelBytes || len(b) != maxChannelBytes || a == b {
		t.Fatalf("long names give channels %q and %q; want two distinct %d-byte names", a, b, maxChannelBytes)
	}
}

// gatedPool is a pool that counts the runs of one statement, holds the
// first back until gate closes, and fails the one numbered fail (if any)
// with an injected error instead of sending it.
type gatedPool struct {
	*pgxpool.Pool
	sql   string
	reads atomic.Int32
	gate  chan struct{}
	fail  int32
}

func (p *gatedPool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if sql != p.sql {
		return p.Pool.QueryRow(ctx, sql, args...)
	}
	switch p.reads.Add(1) {
	case 1:
		<-p.gate
	case p.fail:
		return errRow{&pgconn.PgError{Code: "42501", Message: "test: permission denied"}}
	}
	return p.Pool.QueryRow(ctx, sql, args...)
}

// errRow is a row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// TestWatchSharesReads: the watches of one key registered while a read of
// it is in flight share the next read. With the first read held back, 199
// more watches of the key cost one read between them; every one of them
// is in place (a later release wakes them all).
func TestWatchSharesReads(t *testing.T) {
	t.Parallel()
	const watches = 200
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opts := tables(t, admin)
	db := &gatedPool{Pool: newPool(t, srv.URL, 8), gate: make(chan struct{})}
	l, err := New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	db.sql = l.q.watch
	held := acquireOK(t, l, "k", time.Minute)
	ctx := t.Context()
	chans := make(chan (<-chan struct{}), watches)
	watch := func() {
		ch, _ := l.Watch(ctx, "k")
		chans <- ch
	}
	go watch()
	await(t, "the first read", func() bool { return db.reads.Load() == 1 })
	for range watches - 1 {
		go watch()
	}
	sk, _ := storageKey("k")
	await(t, "the other watches join the next read", func() bool {
		l.notes.mu.Lock()
		defer l.notes.mu.Unlock()
		kw := l.notes.keys[sk]
		return kw != nil && kw.pending != nil && len(kw.pending.members) == watches-1
	})
	close(db.gate)
	var all []<-chan struct{}
	for range watches {
		ch := receive(t, "a watch in place", chans)
		select {
		case <-ch:
			t.Fatal("a watch of a held key fired")
		default:
		}
		all = append(all, ch)
	}
	if n := db.reads.Load(); n != 2 {
		t.Fatalf("%d watches read the key %d times; want 2 (the held-back read and one shared by the rest)", watches, n)
	}
	if out, err := l.Release(ctx, held.ID); err != nil || !out.OK {
		t.Fatalf("release: %+v, %v", out, err)
	}
	for _, ch := range all {
		receive(t, "the release's notification", ch)
	}
}
