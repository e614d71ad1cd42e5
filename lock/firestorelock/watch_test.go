package firestorelock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
)

// hourly is a back-off that never runs out during a test: a waiter built
// with it gets the lock within the test only if a watch wakes it.
var hourly = []lock.Option{lock.WithBackoff(idemkit.Backoff{Base: time.Hour, Max: time.Hour}), lock.WithTimeout(time.Hour)}

// short is a back-off that polls.
var short = []lock.Option{lock.WithBackoff(idemkit.Backoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}), lock.WithTimeout(30 * time.Second)}

// spy is a locker whose watches report, once they are in place, that a
// waiter sleeps on them: after such a report, a release reaches the
// waiter only through the key's listener.
type spy struct {
	*firestorelock.Locker
	armed   chan string
	watches atomic.Int32
}

func newSpy(l *firestorelock.Locker) *spy { return &spy{Locker: l, armed: make(chan string, 4096)} }

func (s *spy) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	ch, stop := s.Locker.Watch(ctx, key)
	s.watches.Add(1)
	armed := firestorelock.Armed(s.Locker, key)
	select {
	case <-ch:
	default:
		if armed {
			s.armed <- key
		}
	}
	return ch, stop
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

// waitFor runs lock.Do on key through l in a goroutine of its own and
// returns the channels of its result and of the lease it got.
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

// listenMethod is the full gRPC method name of Firestore's Listen.
const listenMethod = "/google.firestore.v1.Firestore/Listen"

// listens counts a client's open Listen streams and can break them: a
// stream interceptor on the real connection to the emulator.
type listens struct {
	open, opened atomic.Int32
	refuse       atomic.Uint32 // a gRPC code: new streams fail with it, and live ones break with it; 0 lets them through
	mu           sync.Mutex
	live         map[*listenStream]struct{}
}

func newListens() *listens { return &listens{live: make(map[*listenStream]struct{})} }

func (s *listens) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if method != listenMethod {
			return streamer(ctx, desc, cc, method, opts...)
		}
		if c := codes.Code(s.refuse.Load()); c != codes.OK {
			return nil, status.Error(c, "test: the listen stream is refused")
		}
		ctx, cancel := context.WithCancel(ctx)
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			cancel()
			return nil, err
		}
		ls := &listenStream{ClientStream: cs, s: s, cancel: cancel}
		s.mu.Lock()
		// Checked again under the lock breakAll takes: a stream that was
		// opening when breakAll ran is refused too, never let through.
		if c := codes.Code(s.refuse.Load()); c != codes.OK {
			s.mu.Unlock()
			cancel()
			return nil, status.Error(c, "test: the listen stream is refused")
		}
		s.live[ls] = struct{}{}
		s.mu.Unlock()
		s.open.Add(1)
		s.opened.Add(1)
		return ls, nil
	})}
}

// breakAll makes new Listen streams fail with code and breaks the live
// ones with it.
func (s *listens) breakAll(code codes.Code) {
	s.refuse.Store(uint32(code))
	s.mu.Lock()
	defer s.mu.Unlock()
	for ls := range s.live {
		ls.cancel()
	}
}

type listenStream struct {
	grpc.ClientStream
	s      *listens
	cancel context.CancelFunc
	once   sync.Once
}

func (ls *listenStream) RecvMsg(m any) error {
	err := ls.ClientStream.RecvMsg(m)
	if err == nil {
		return nil
	}
	ls.once.Do(func() {
		ls.s.mu.Lock()
		delete(ls.s.live, ls)
		ls.s.mu.Unlock()
		ls.s.open.Add(-1)
	})
	if c := codes.Code(ls.s.refuse.Load()); c != codes.OK && status.Code(err) == codes.Canceled {
		return status.Error(c, "test: the listen stream broke")
	}
	return err
}

// watchedLocker is a warmed-up locker in project on a client whose Listen
// streams s counts.
func watchedLocker(t *testing.T, project string, s *listens, opts ...firestorelock.Option) *firestorelock.Locker {
	t.Helper()
	l, err := firestorelock.New(client(t, project, s.dialOptions()...), opts...)
	if err != nil {
		t.Fatal(err)
	}
	warm(t, l)
	return l
}

// TestWatchWakesDo: a lock.Do waiter whose back-off is an hour gets the
// lock as soon as another client releases it: only the key's snapshot
// listener can wake it within the test.
func TestWatchWakesDo(t *testing.T) {
	t.Parallel()
	p := project(t)
	s := newListens()
	l := watchedLocker(t, p, s)
	holder := newLocker(t, p) // another client
	held := acquireOK(t, holder, "k", time.Minute)
	sp := newSpy(l)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	errs, leases := waitFor(ctx, sp, "k", hourly...)
	receive(t, "the waiter's watch", sp.armed)
	released := time.Now()
	if out, err := holder.ReleaseKey(ctx, held.Key, held.ID); err != nil || !out.OK {
		t.Fatalf("release: %+v, %v", out, err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("Do with an hour's back-off was not woken by the release: %v", err)
	}
	if got := <-leases; got.Fence <= held.Fence {
		t.Fatalf("the waiter's fence %v does not follow the holder's %v", got.Fence, held.Fence)
	}
	t.Logf("the waiter held the lock %v after the release was sent", time.Since(released))
	if n := s.opened.Load(); n != 1 {
		t.Fatalf("%d Listen streams opened; want 1", n)
	}
}

// TestWatchFiresAtExpiry: a lease that runs out writes nothing, but the
// listener knows its expiry: a waiter with an hour's back-off gets a lock
// abandoned by its holder once it expires.
func TestWatchFiresAtExpiry(t *testing.T) {
	t.Parallel()
	p := project(t)
	l := newLocker(t, p)
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

// TestWatchStreamBroken breaks the listener's Listen stream and refuses
// new ones for a while: a waiter with a short back-off still gets the lock,
// by polling, although the release could reach no listener. Once streams
// are let through again, the listener comes back (a new stream) and a
// waiter with an hour's back-off is woken through it again.
//
// "transient": the stream breaks with Unavailable, which the client
// retries, resuming the stream where it stopped. "permanent": it breaks
// with PermissionDenied, which ends the listener; its watches fire, and a
// new listener starts after a back-off.
func TestWatchStreamBroken(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		code codes.Code
	}{{"transient", codes.Unavailable}, {"permanent", codes.PermissionDenied}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := project(t)
			s := newListens()
			l := watchedLocker(t, p, s)
			holder := newLocker(t, p)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			sp := newSpy(l)

			// The key's listener is up.
			held := acquireOK(t, holder, "a", time.Minute)
			_, stop := l.Watch(ctx, "a")
			await(t, "the listener's first snapshot", func() bool { return firestorelock.Armed(l, "a") })
			stop()

			// Break it, and refuse new streams.
			s.breakAll(c.code)
			await(t, "the stream breaks", func() bool { return s.open.Load() == 0 })
			watches := sp.watches.Load()
			errs, _ := waitFor(ctx, sp, "a", short...)
			await(t, "the waiter waits", func() bool { return sp.watches.Load() > watches })
			if out, err := holder.ReleaseKey(ctx, held.Key, held.ID); err != nil || !out.OK {
				t.Fatalf("release: %+v, %v", out, err)
			}
			if err := <-errs; err != nil {
				t.Fatalf("without a listen stream, the waiter did not get the lock by polling: %v", err)
			}
			if n := s.open.Load(); n != 0 {
				t.Fatalf("%d Listen streams were open while they were refused", n)
			}

			// Let streams through: the listener comes back and wakes
			// waiters again.
			opened := s.opened.Load()
			s.refuse.Store(uint32(codes.OK))
			held = acquireOK(t, holder, "a", time.Minute)
			await(t, "a listener shows the key held", func() bool {
				_, stop := l.Watch(ctx, "a")
				defer stop()
				return firestorelock.Armed(l, "a")
			})
			errs, _ = waitFor(ctx, sp, "a", hourly...)
			receive(t, "the waiter's watch", sp.armed)
			if out, err := holder.ReleaseKey(ctx, held.Key, held.ID); err != nil || !out.OK {
				t.Fatalf("release: %+v, %v", out, err)
			}
			if err := <-errs; err != nil {
				t.Fatalf("after the stream came back, Do with an hour's back-off was not woken: %v", err)
			}
			if s.opened.Load() == opened {
				t.Fatal("no new Listen stream was opened")
			}
			if running, _ := firestorelock.Listeners(l); running != 1 || s.open.Load() != 1 {
				t.Fatalf("%d listeners on %d open streams; want 1 on 1", running, s.open.Load())
			}
		})
	}
}

// TestWatchListenerCount parks 1000 lock.Do waiters on 10 keys held by
// another client: the locker runs one listener (one Listen stream) per
// key, however many wait on it. Once the waiters leave, the listeners stop.
func TestWatchListenerCount(t *testing.T) {
	t.Parallel()
	const (
		keys    = 10
		waiters = 1000
	)
	p := project(t)
	s := newListens()
	l := watchedLocker(t, p, s)
	holder := newLocker(t, p)
	for i := range keys {
		acquireOK(t, holder, fmt.Sprintf("k/%d", i), time.Hour)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	failures := make(chan error, waiters)
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs, _ := waitFor(ctx, l, fmt.Sprintf("k/%d", i%keys), hourly...)
			if err := <-errs; !errors.Is(err, context.Canceled) {
				failures <- fmt.Errorf("Do = %v; want it cancelled", err)
			}
		}()
	}
	await(t, "every waiter watches", func() bool {
		n := 0
		for i := range keys {
			n += firestorelock.Waiters(l, fmt.Sprintf("k/%d", i))
		}
		return n == waiters
	})
	if running, started := firestorelock.Listeners(l); running != keys || started != keys || s.open.Load() != keys {
		t.Fatalf("%d waiters on %d keys: %d listeners running, %d started, %d Listen streams open; want %d each",
			waiters, keys, running, started, s.open.Load(), keys)
	}
	cancel()
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Fatal(err)
	}
	await(t, "the idle listeners stop", func() bool {
		running, _ := firestorelock.Listeners(l)
		return running == 0 && s.open.Load() == 0
	})
}

// TestWatchLimit: at most WithWatchLimit keys have a listener; a watch of
// another key never fires (its waiter polls), and a limit of 0 turns
// watching off.
func TestWatchLimit(t *testing.T) {
	t.Parallel()
	p := project(t)
	l := newLocker(t, p, firestorelock.WithWatchLimit(2))
	holder := newLocker(t, p)
	ctx := t.Context()
	var held []lock.Lease
	var chans []<-chan struct{}
	for i := range 3 {
		key := fmt.Sprintf("k/%d", i)
		held = append(held, acquireOK(t, holder, key, time.Minute))
		ch, stop := l.Watch(ctx, key)
		defer stop()
		chans = append(chans, ch)
	}
	if running, _ := firestorelock.Listeners(l); running != 2 {
		t.Fatalf("%d listeners; want the limit, 2", running)
	}
	for _, lease := range held {
		if out, err := holder.ReleaseKey(ctx, lease.Key, lease.ID); err != nil || !out.OK {
			t.Fatalf("release: %+v, %v", out, err)
		}
	}
	receive(t, "the first key's watch", chans[0])
	receive(t, "the second key's watch", chans[1])
	select {
	case <-chans[2]:
		t.Fatal("the watch of a key beyond the limit fired")
	default:
	}

	off := newLocker(t, p, firestorelock.WithWatchLimit(0))
	acquireOK(t, holder, "off", time.Minute)
	ch, stop := off.Watch(ctx, "off")
	defer stop()
	if running, _ := firestorelock.Listeners(off); running != 0 {
		t.Fatalf("a locker with watching off runs %d listeners", running)
	}
	select {
	case <-ch:
		t.Fatal("a watch with watching off fired")
	default:
	}
}

// TestWatchFreeKey: the watch of a key that holds no live lease (no
// document, or a tombstone) fires at once, so a release made before the
// watch was in place is not missed.
func TestWatchFreeKey(t *testing.T) {
	t.Parallel()
	p := project(t)
	l := newLocker(t, p)
	ctx := t.Context()
	ch, stop := l.Watch(ctx, "never-locked")
	defer stop()
	receive(t, "the watch of a key without a document", ch)

	lease := acquireOK(t, l, "released", time.Minute)
	if out, err := l.Release(ctx, lease.ID); err != nil || !out.OK {
		t.Fatalf("release: %+v, %v", out, err)
	}
	ch, stop = l.Watch(ctx, "released")
	defer stop()
	receive(t, "the watch of a released key", ch)

	ch, _ = l.Watch(ctx, "")
	receive(t, "the watch of an invalid key", ch)
}
