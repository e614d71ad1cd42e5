package firestorestore_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// slowPolls is a poll back-off far above any notification delay: a
// duplicate's first poll comes 10 s after it starts waiting at the
// earliest (half the back-off, with jitter), so only a notification
// answers it sooner.
var slowPolls = idemkit.Backoff{Base: 20 * time.Second, Max: 20 * time.Second}

// earliestPoll is the earliest a duplicate polls with slowPolls.
const earliestPoll = 10 * time.Second

// fired reports whether ch is closed.
func fired(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// await waits until cond holds, failing the test if it does not within a
// minute (it is a guard against hanging, not a measure).
func await(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
	}
}

// awaitFired waits until ch closes.
func awaitFired(t testing.TB, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("%s: the watch did not fire within a minute", what)
	}
}

// awaitEnded waits until every listener of s has ended and its Listen
// stream closed.
func awaitEnded(t testing.TB, s *firestorestore.Store, ls *listens) {
	t.Helper()
	await(t, "the listeners' end", func() bool {
		open, _ := ls.counts()
		return firestorestore.Listeners(s).Running == 0 && open == 0
	})
}

// listens counts the Listen streams a client opens and lets a test lose
// their messages (mute) or cut them with an error. It counts the
// client's reads too.
type listens struct {
	mu      sync.Mutex
	open    map[*listenStream]struct{}
	opened  int
	muted   atomic.Pointer[muting] // set by mute, until unmute
	dropped atomic.Int32           // messages lost while muted
	reads   atomic.Int32           // reads (BatchGetDocuments) answered
}

// dialOption passes the client's Listen streams through l.
func (l *listens) dialOption() grpc.DialOption {
	return grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if strings.HasSuffix(method, "/BatchGetDocuments") {
			if lost := l.muted.Load(); lost != nil {
				// No read learns of a change before its notification was
				// lost.
				select {
				case <-lost.lost:
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(10 * time.Second): // the test reports it
				}
			}
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &readStream{ClientStream: cs, reads: &l.reads}, nil
		}
		if !strings.HasSuffix(method, "/Listen") {
			return streamer(ctx, desc, cc, method, opts...)
		}
		sctx, cancel := context.WithCancel(ctx)
		cs, err := streamer(sctx, desc, cc, method, opts...)
		if err != nil {
			cancel()
			return nil, err
		}
		s := &listenStream{ClientStream: cs, l: l, cancel: cancel}
		l.mu.Lock()
		if l.open == nil {
			l.open = map[*listenStream]struct{}{}
		}
		l.open[s] = struct{}{}
		l.opened++
		l.mu.Unlock()
		return s, nil
	})
}

// mute drops the messages of every Listen stream until unmute is called.
// Meanwhile a read is sent only once a message has been dropped (or 10 s
// have passed), so that no read can learn of a change before the change's
// notification was lost.
func (l *listens) mute() (unmute func()) {
	lost := make(chan struct{})
	l.muted.Store(&muting{lost: lost, drop: sync.OnceFunc(func() { close(lost) })})
	return func() { l.muted.Store(nil) }
}

// muting is one mute of a listens.
type muting struct {
	lost chan struct{} // closed by drop
	drop func()        // called for each message dropped
}

// counts returns the Listen streams open now and opened so far.
func (l *listens) counts() (open, opened int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open), l.opened
}

// cut ends every open Listen stream with an error of code, as a broken
// connection or a refusal would.
func (l *listens) cut(code codes.Code) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.open {
		s.cut.Store(status.New(code, "the test cut the stream"))
		s.cancel()
	}
	return len(l.open)
}

// readStream counts a read once it has been answered in full.
type readStream struct {
	grpc.ClientStream
	reads *atomic.Int32
}

func (s *readStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == io.EOF {
		s.reads.Add(1)
	}
	return err
}

type listenStream struct {
	grpc.ClientStream
	l      *listens
	cancel context.CancelFunc
	cut    atomic.Pointer[status.Status]
}

func (s *listenStream) RecvMsg(m any) error {
	for {
		err := s.ClientStream.RecvMsg(m)
		if st := s.cut.Load(); st != nil {
			err = st.Err()
		}
		if err != nil {
			s.l.mu.Lock()
			delete(s.l.open, s)
			s.l.mu.Unlock()
			s.cancel()
			return err
		}
		mute := s.l.muted.Load()
		if mute == nil {
			return nil
		}
		s.l.dropped.Add(1)
		mute.drop()
	}
}

// TestWatchFiresWhenTheClaimEnds: a watch closes when its key's claim
// ends — an outcome, a release, a delete, a claim with another fence, the
// lease running out — never on an extension, nor on another key's change.
func TestWatchFiresWhenTheClaimEnds(t *testing.T) {
	t.Parallel()
	p := testenv.FirestoreProject(t)
	s := newStore(t, client(t, p))
	other := newStore(t, client(t, p)) // another process writes
	ctx := t.Context()
	const lease = time.Minute
	for _, end := range []string{"complete", "not-replayable", "release", "delete", "release and claim again", "lease runs out"} {
		t.Run(end, func(t *testing.T) {
			key, quiet := "order-"+end, "quiet-"+end
			ttl := lease
			if end == "lease runs out" {
				ttl = 2 * time.Second
			}
			claim, claimed, err := other.Claim(ctx, key, "fp", ttl)
			if err != nil || !claimed {
				t.Fatal(claimed, err)
			}
			if _, _, err := other.Claim(ctx, quiet, "fp", lease); err != nil {
				t.Fatal(err)
			}
			ch, stop := s.Watch(ctx, key)
			defer stop()
			qch, qstop := s.Watch(ctx, quiet)
			defer qstop()
			if fired(ch) {
				t.Fatal("the watch fired before any change")
			}
			if end != "lease runs out" {
				// An extension is a snapshot that changes nothing.
				before := firestorestore.Listeners(s).Applied
				if _, ok, err := other.Extend(ctx, key, claim.Fence, lease); !ok || err != nil {
					t.Fatal(ok, err)
				}
				await(t, "the extension's snapshot", func() bool { return firestorestore.Listeners(s).Applied > before })
				if fired(ch) {
					t.Fatal("an extension fired the watch")
				}
			}
			out := store.Record{Key: key, Fingerprint: "fp", State: store.StateCompleted, Response: []byte("r"), Fence: claim.Fence}
			switch end {
			case "complete":
				_, err = other.Complete(ctx, out, lease)
			case "not-replayable":
				out.State, out.Response = store.StateNotReplayable, nil
				_, err = other.Complete(ctx, out, lease)
			case "release":
				_, err = other.Release(ctx, key, claim.Fence)
			case "delete":
				_, err = other.Delete(ctx, key)
			case "release and claim again":
				if _, err = other.Release(ctx, key, claim.Fence); err == nil {
					_, _, err = other.Claim(ctx, key, "fp", lease)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			awaitFired(t, end, ch)
			if end == "lease runs out" {
				// Woken when Firestore's clock has passed the lease: the
				// record can be claimed.
				if _, claimed, err := s.Claim(ctx, key, "fp", lease); err != nil || !claimed {
					t.Fatalf("a claim after the lease ran out: %v, %v; want it taken over", claimed, err)
				}
			}
			if fired(qch) {
				t.Fatal("another key's watch fired")
			}
		})
	}
}

// TestWatchesShareOneListener: a thousand watches of one claimed key
// share one listener (one Listen stream); a thousand over 20 keys, one
// listener a key. A listener stops with its last watch (here without
// lingering).
func TestWatchesShareOneListener(t *testing.T) {
	t.Parallel()
	ls := &listens{}
	c := client(t, testenv.FirestoreProject(t), ls.dialOption())
	s := newStore(t, c)
	firestorestore.SetListenerLinger(s, 0)
	ctx := t.Context()
	claimed := newStore(t, c)
	watchAll := func(keys []string, n int) []func() {
		for _, k := range keys {
			if _, ok, err := claimed.Claim(ctx, k, "fp", time.Hour); err != nil || !ok {
				t.Fatalf("Claim: %v, %v", ok, err)
			}
		}
		stops := make([]func(), n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				ch, stop := s.Watch(ctx, keys[i%len(keys)])
				if fired(ch) {
					t.Error("a watch fired before any change")
				}
				stops[i] = stop
			})
		}
		wg.Wait()
		return stops
	}
	stops := watchAll([]string{"k"}, 1000)
	got := firestorestore.Listeners(s)
	open, opened := ls.counts()
	t.Logf("1000 watches of one key: running %d, started %d, watches %v; Listen streams open %d, opened %d", got.Running, got.Started, got.Watches, open, opened)
	if got.Running != 1 || got.Started != 1 || len(got.Watches) != 1 || got.Watches["k"] != 1000 || open != 1 || opened != 1 {
		t.Fatalf("1000 watches of one key: %+v, %d Listen streams open (%d opened); want one listener and stream serving 1000 watches", got, open, opened)
	}
	for _, stop := range stops[:999] {
		stop()
		stop() // a second stop changes nothing
	}
	if got := firestorestore.Listeners(s); len(got.Watches) != 1 || got.Watches["k"] != 1 {
		t.Fatalf("after 999 stops: %+v; want the listener serving 1 watch", got)
	}
	stops[999]()
	awaitEnded(t, s, ls)
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	stops = watchAll(keys, 1000)
	got = firestorestore.Listeners(s)
	open, opened = ls.counts()
	total, fewest := got.Waiting()
	t.Logf("1000 watches of 20 keys: running %d, started %d, watches %d (%d a key at the fewest); Listen streams open %d, opened %d", got.Running, got.Started, total, fewest, open, opened)
	if got.Running != 20 || len(got.Watches) != 20 || got.Started != 21 || total != 1000 || fewest != 50 || open != 20 || opened != 21 {
		t.Fatalf("1000 watches of 20 keys: %+v, %d Listen streams open (%d opened); want 20 listeners and streams, 50 watches each", got, open, opened)
	}
	for _, stop := range stops {
		stop()
	}
	awaitEnded(t, s, ls)
}

// TestWatchBounds: past WithMaxListeners a watch is not set up (its
// channel never fires; the caller polls) unless a listener lingers without
// watches, which stops for it; and neither is one whose ctx
// ends before its listener's first snapshot (a stalled emulator): that
// listener stops.
func TestWatchBounds(t *testing.T) {
	t.Parallel()
	t.Run("max listeners", func(t *testing.T) {
		t.Parallel()
		p := testenv.FirestoreProject(t)
		s := newStore(t, client(t, p), firestorestore.WithMaxListeners(2))
		ctx := t.Context()
		for _, k := range []string{"a", "b", "c"} {
			_, stop := s.Watch(ctx, k)
			defer stop()
		}
		if got := firestorestore.Listeners(s); got.Started != 2 || len(got.Watches) != 2 || got.Watches["c"] != 0 {
			t.Fatalf("3 keys watched with at most 2 listeners: %+v; want 2 listeners, none on the third key", got)
		}
		// A listener that lingers without watches gives its place up.
		lingering := newStore(t, client(t, p), firestorestore.WithMaxListeners(1))
		_, stop := lingering.Watch(ctx, "a")
		stop()
		_, stop = lingering.Watch(ctx, "b")
		defer stop()
		if got := firestorestore.Listeners(lingering); got.Started != 2 || len(got.Watches) != 1 || got.Watches["b"] != 1 {
			t.Fatalf("a watch while the only listener lingered: %+v; want the lingering one stopped for it", got)
		}
		off := newStore(t, client(t, p), firestorestore.WithMaxListeners(0))
		ch, stop := off.Watch(ctx, "a")
		stop()
		if fired(ch) || firestorestore.Listeners(off).Started != 0 {
			t.Fatal("a store with no listeners started one")
		}
	})
	t.Run("stalled", func(t *testing.T) {
		t.Parallel()
		e := testenv.NewFirestore(t)
		ls := &listens{}
		s := newStore(t, dial(t, e.Host, testenv.FirestoreProject(t), ls.dialOption()))
		firestorestore.SetListenerLinger(s, 0)
		// A first listener, on a running emulator, which may take its time
		// to answer first.
		_, stop := s.Watch(t.Context(), "warm")
		stop()
		resume := e.Stall(t)
		defer resume()
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		ch, stop := s.Watch(ctx, "k")
		defer stop()
		if ctx.Err() == nil {
			t.Fatal("Watch returned before its listener's first snapshot")
		}
		if fired(ch) {
			t.Fatal("a watch that was not set up fired")
		}
		awaitEnded(t, s, ls)
	})
}

// holdKey runs work on key through g that holds the claim until the
// returned release is called (at least hold after it started), and
// returns when the work has started. release returns when the work ended
// and wait when the call has answered.
func holdKey(t *testing.T, g *middleware.Guard, key string, fp fingerprint.Fingerprint, hold time.Duration) (release func() time.Time, wait func()) {
	t.Helper()
	started, ended := make(chan struct{}), make(chan time.Time, 1)
	free := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := g.Execute(t.Context(), key, fp, func(ctx context.Context) (middleware.Result, error) {
			begin := time.Now()
			close(started)
			select {
			case <-free:
			case <-ctx.Done(): // the test failed
				return middleware.Result{}, ctx.Err()
			}
			time.Sleep(hold - time.Since(begin))
			ended <- time.Now()
			return middleware.Result{Value: []byte("v")}, nil
		})
		done <- err
	}()
	<-started
	release = func() time.Time { close(free); return <-ended }
	wait = func() {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	return release, wait
}

// duplicates starts n duplicates of key spread over guards; wait returns
// when each answered, once all have, failing on any that did not replay
// "v".
func duplicates(t *testing.T, guards []*middleware.Guard, key string, fp fingerprint.Fingerprint, n int) (wait func() []time.Time) {
	answered := make([]time.Time, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			out, err := guards[i%len(guards)].Execute(t.Context(), key, fp, func(context.Context) (middleware.Result, error) {
				t.Error("a duplicate ran the work")
				return middleware.Result{}, nil
			})
			answered[i] = time.Now()
			if err != nil || !out.Replayed || string(out.Value) != "v" {
				t.Errorf("duplicate %d: %+v, %v; want a replay", i, out, err)
			}
		})
	}
	return func() []time.Time { wg.Wait(); return answered }
}

// percentile returns the p-th percentile of ds (sorted in place).
func percentile(ds []time.Duration, p float64) time.Duration {
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(float64(len(ds))*p))]
}

// TestDuplicatesWokenByNotification: two guards, each with a client of
// its own, 32 duplicates of a request whose work takes 200 ms: every
// duplicate replays the outcome long before it could have polled, and each
// guard's store serves its 16 waiting duplicates with one listener.
func TestDuplicatesWokenByNotification(t *testing.T) {
	t.Parallel()
	p := testenv.FirestoreProject(t)
	opts := []middleware.Option{middleware.WithBackoff(slowPolls), middleware.WithWaitBudget(time.Minute), middleware.WithLogger(discard())}
	stores := make([]*firestorestore.Store, 2)
	guards := make([]*middleware.Guard, 2)
	for i := range guards {
		stores[i] = newStore(t, client(t, p), firestorestore.WithLogger(discard()))
		g, err := middleware.New(stores[i], opts...)
		if err != nil {
			t.Fatal(err)
		}
		guards[i] = g
	}
	fp := fingerprint.New("test", [32]byte{7})
	const n = 32
	release, wait := holdKey(t, guards[0], "order-1", fp, 200*time.Millisecond)
	answers := duplicates(t, guards, "order-1", fp, n)
	for _, s := range stores {
		await(t, "the duplicates' watches", func() bool { total, _ := firestorestore.Listeners(s).Waiting(); return total == n/2 })
		if got := firestorestore.Listeners(s); got.Running != 1 || got.Started != 1 || len(got.Watches) != 1 {
			t.Fatalf("%d duplicates waiting on a store: %+v; want one listener", n/2, got)
		}
	}
	ended := release()
	delays := make([]time.Duration, n)
	for i, at := range answers() {
		delays[i] = at.Sub(ended)
		// A duplicate started waiting before the work ended: its first
		// poll comes earliestPoll after that at the earliest.
		if delays[i] >= earliestPoll {
			t.Fatalf("duplicate %d answered %v after the work ended: it polled", i, delays[i])
		}
	}
	wait()
	t.Logf("%d duplicates over 2 guards: delay from the work's end to the answer p50 %v, p99 %v, max %v",
		n, percentile(delays, 0.50), percentile(delays, 0.99), percentile(delays, 1))
}

// TestThousandWaitingDuplicates: 1000 duplicates waiting on one guard
// (one store, one client) use one listener and one Listen stream for one
// key, one per key for 20 keys, and are all woken by the notification.
func TestThousandWaitingDuplicates(t *testing.T) {
	t.Parallel()
	ls := &listens{}
	p := testenv.FirestoreProject(t)
	s := newStore(t, client(t, p, ls.dialOption()), firestorestore.WithLogger(discard()))
	firestorestore.SetListenerLinger(s, 0)
	g, err := middleware.New(s, middleware.WithBackoff(slowPolls), middleware.WithWaitBudget(2*time.Minute),
		middleware.WithOpTimeout(time.Minute), middleware.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	holder := newGuard(t, client(t, p))
	fp := fingerprint.New("test", [32]byte{8})
	for _, keys := range []int{1, 20} {
		t.Run(fmt.Sprintf("%d keys", keys), func(t *testing.T) {
			var releases []func() time.Time
			var waits []func()
			var answers []func() []time.Time
			for k := range keys {
				key := fmt.Sprintf("order-%d-%d", keys, k)
				release, wait := holdKey(t, holder, key, fp, 0)
				releases, waits = append(releases, release), append(waits, wait)
				answers = append(answers, duplicates(t, []*middleware.Guard{g}, key, fp, 1000/keys))
			}
			await(t, "the duplicates' watches", func() bool {
				total, _ := firestorestore.Listeners(s).Waiting()
				return total == 1000
			})
			got := firestorestore.Listeners(s)
			total, fewest := got.Waiting()
			open, _ := ls.counts()
			t.Logf("1000 duplicates waiting on %d keys: %d listeners running, %d watches (%d a key at the fewest); Listen streams open %d",
				keys, got.Running, total, fewest, open)
			if got.Running != keys || len(got.Watches) != keys || fewest != 1000/keys || open != keys {
				t.Fatalf("1000 duplicates waiting on %d keys: %+v, %d Listen streams open; want %d", keys, got, open, keys)
			}
			var worst time.Duration
			for k, release := range releases {
				ended := release()
				for _, at := range answers[k]() {
					worst = max(worst, at.Sub(ended))
				}
				waits[k]()
			}
			if worst >= earliestPoll {
				t.Fatalf("a duplicate answered %v after the work ended: it polled", worst)
			}
			t.Logf("the last of 1000 duplicates answered %v after its work ended", worst)
			awaitEnded(t, s, ls)
		})
	}
}

// TestExactlyOnceWithNotification races 64 goroutines over two guards
// with clients of their own on one key, 5 times: the work runs once and
// every duplicate replays it, woken by the notification (their polls are
// far apart).
func TestExactlyOnceWithNotification(t *testing.T) {
	t.Parallel()
	p := testenv.FirestoreProject(t)
	guards := make([]*middleware.Guard, 2)
	for i := range guards {
		guards[i] = newGuard(t, client(t, p), middleware.WithBackoff(slowPolls), middleware.WithWaitBudget(2*time.Minute), middleware.WithOpTimeout(time.Minute))
	}
	start := time.Now()
	st := guardtest.ExactlyOnce(t, guards, guardtest.Race{Callers: 64, Rounds: 5, KeyPrefix: "order-", MaxWork: 50 * time.Millisecond})
	t.Logf("%+v in %v", st, time.Since(start))
}

// awaitWaiting waits until one duplicate watches on s and has read its
// record reads times (its claim, and its claim again once the watch is in
// place): it is then waiting.
func awaitWaiting(t testing.TB, s *firestorestore.Store, ls *listens, reads int32) {
	t.Helper()
	await(t, "the duplicate's wait", func() bool {
		got := firestorestore.Listeners(s)
		total, _ := got.Waiting()
		return total == 1 && len(got.Ready) == 1 && ls.reads.Load() >= reads
	})
}

// TestLostNotification: the completion's notification is lost (the
// listener's messages dropped): a duplicate still gets its replay by
// polling, within its budget. Then the Listen stream is cut, by a refusal
// (the listener fails: its watch is woken and watched again on a new
// listener) and by a broken connection (the client reopens the stream and
// resumes where it was): either way a later completion wakes the
// duplicate before it could have polled.
func TestLostNotification(t *testing.T) {
	t.Parallel()
	p := testenv.FirestoreProject(t)
	ls := &listens{}
	s := newStore(t, client(t, p, ls.dialOption()), firestorestore.WithLogger(discard()))
	firestorestore.SetListenerLinger(s, 0)
	fastPolls, err := middleware.New(s, middleware.WithBackoff(idemkit.Backoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond}),
		middleware.WithWaitBudget(time.Minute), middleware.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	slow, err := middleware.New(s, middleware.WithBackoff(slowPolls), middleware.WithWaitBudget(time.Minute), middleware.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	holder := newGuard(t, client(t, p))
	fp := fingerprint.New("test", [32]byte{9})

	t.Run("lost", func(t *testing.T) {
		release, wait := holdKey(t, holder, "lost", fp, 0)
		reads := ls.reads.Load()
		answers := duplicates(t, []*middleware.Guard{fastPolls}, "lost", fp, 1)
		awaitWaiting(t, s, ls, reads+2)
		unmute := ls.mute()
		release()
		answers() // a replay, by polling
		unmute()
		wait()
		if ls.dropped.Load() == 0 {
			t.Fatal("no message was lost")
		}
		awaitEnded(t, s, ls)
	})
	for _, cut := range []struct {
		name  string
		code  codes.Code
		new   bool // the listener fails, and a new one starts
		early bool // the work ends before the Listen stream is back
	}{
		{"refused", codes.PermissionDenied, true, false},
		{"broken", codes.Unavailable, false, false},
		{"broken, the work ends meanwhile", codes.Unavailable, false, true},
	} {
		t.Run(cut.name, func(t *testing.T) {
			key := "cut-" + cut.name
			release, wait := holdKey(t, holder, key, fp, 0)
			reads := ls.reads.Load()
			answers := duplicates(t, []*middleware.Guard{slow}, key, fp, 1)
			awaitWaiting(t, s, ls, reads+2)
			started := firestorestore.Listeners(s).Started
			_, opened := ls.counts()
			cutAt := time.Now()
			if n := ls.cut(cut.code); n != 1 {
				t.Fatalf("%d Listen streams cut; want 1", n)
			}
			var ended time.Time
			if cut.early {
				// The client reopens the stream after a pause, and resumes
				// where the stream was: the change is not lost.
				ended = release()
			} else {
				// The duplicate watches again: on a new listener when the
				// listener failed, else on the one it had, whose stream the
				// client reopens.
				if cut.new {
					// Woken: a claim, a new watch, a claim again.
					reads += 2
				}
				awaitWaiting(t, s, ls, reads+2)
				await(t, "the Listen stream again", func() bool {
					open, n := ls.counts()
					return open == 1 && n > opened
				})
				if got := firestorestore.Listeners(s); (got.Started > started) != cut.new || got.Running != 1 {
					t.Fatalf("after the cut: %+v (%d started before); want a new listener: %v", got, started, cut.new)
				}
				ended = release()
			}
			answered := answers()[0]
			wait()
			// Every wait of the duplicate after the cut began after it, so
			// its first poll came earliestPoll after the cut at the earliest.
			if d := answered.Sub(cutAt); d >= earliestPoll {
				t.Fatalf("the duplicate answered %v after the cut: it polled", d)
			}
			t.Logf("the duplicate answered %v after the work ended", answered.Sub(ended))
			if _, n := ls.counts(); n <= opened || (firestorestore.Listeners(s).Started > started) != cut.new {
				t.Fatalf("after the cut: %d Listen streams opened (%d before), %d listeners started (%d before); want the stream reopened, a new listener: %v",
					n, opened, firestorestore.Listeners(s).Started, started, cut.new)
			}
			awaitEnded(t, s, ls)
		})
	}
}

// TestWatchNews: a watch fires at once when its key holds no live claim
// (nothing, an outcome, a tombstone), so a caller that does not read again
// after watching (a lock waiter) misses no release made before the watch
// was in place; a release through the store wakes its watches as it
// returns, before (here: without) the listener's snapshot; and a
// listener outlives its last watch for a while, so a waiter that watches
// again shares it.
func TestWatchNews(t *testing.T) {
	t.Parallel()
	ls := &listens{}
	c := client(t, testenv.FirestoreProject(t), ls.dialOption())
	s := newStore(t, c)
	ctx := t.Context()
	out, _, err := s.Claim(ctx, "completed", "fp", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	out.State, out.Response = store.StateCompleted, []byte("r")
	if ok, err := s.Complete(ctx, out, time.Hour); err != nil || !ok {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	rel, _, err := s.Claim(ctx, "released", "fp", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Release(ctx, "released", rel.Fence); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	for _, k := range []string{"absent", "completed", "released"} {
		ch, stop := s.Watch(ctx, k)
		if !fired(ch) {
			t.Errorf("the watch of a key without a live claim (%s) did not fire at once", k)
		}
		stop()
	}

	claim, _, err := s.Claim(ctx, "held", "fp", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ch, stop := s.Watch(ctx, "held")
	defer stop()
	if fired(ch) {
		t.Fatal("the watch of a claimed key fired before any change")
	}
	unmute := ls.mute()
	defer unmute()
	if ok, err := s.Release(ctx, "held", claim.Fence); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	if !fired(ch) {
		t.Fatal("a release through the store did not wake its watch as it returned")
	}
	unmute()

	if _, _, err := s.Claim(ctx, "held", "fp", time.Hour); err != nil {
		t.Fatal(err)
	}
	started := firestorestore.Listeners(s).Started
	stop()
	again, stopAgain := s.Watch(ctx, "held")
	defer stopAgain()
	if got := firestorestore.Listeners(s); got.Started != started || fired(again) {
		t.Fatalf("a watch again after the last one stopped: %+v (%d started before), fired %v; want it on the lingering listener, waiting for the new claim", got, started, fired(again))
	}
}

// heldRead is a read whose answer, once received, is held back until
// release closes; received closes when it is.
type heldRead struct {
	grpc.ClientStream
	once              sync.Once
	received, release chan struct{}
}

func (s *heldRead) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.once.Do(func() { close(s.received); <-s.release })
	return err
}

// TestClaimAfterALocalWinWritesNothing: a Claim whose read found the key
// free, while another Claim of the same process won the key before this
// one wrote (a hot key's waiters, woken together, do that), answers busy
// with the winner's claim without sending a commit bound to fail.
func TestClaimAfterALocalWinWritesNothing(t *testing.T) {
	t.Parallel()
	var (
		hold              atomic.Bool
		commits           atomic.Int32
		received, release = make(chan struct{}), make(chan struct{})
	)
	c := client(t, testenv.FirestoreProject(t),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || !strings.HasSuffix(method, "/BatchGetDocuments") || !hold.CompareAndSwap(true, false) {
				return cs, err
			}
			return &heldRead{ClientStream: cs, received: received, release: release}, nil
		}),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if strings.HasSuffix(method, "/Commit") {
				commits.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
	s := newStore(t, c)
	ctx := t.Context()
	_, stop := s.Watch(ctx, "k") // the key's listener is up
	defer stop()
	hold.Store(true)
	type answer struct {
		rec     store.Record
		claimed bool
		err     error
	}
	late := make(chan answer, 1)
	go func() {
		rec, claimed, err := s.Claim(ctx, "k", "late", time.Hour)
		late <- answer{rec, claimed, err}
	}()
	<-received // the late Claim has read the key free
	won, claimed, err := s.Claim(ctx, "k", "won", time.Hour)
	if err != nil || !claimed {
		t.Fatalf("Claim = %v, %v", claimed, err)
	}
	before := commits.Load()
	close(release)
	got := <-late
	if got.err != nil || got.claimed || got.rec.Fence != won.Fence || got.rec.Fingerprint != "won" || !got.rec.ExpiresAt.Equal(won.ExpiresAt) {
		t.Fatalf("the late Claim = %+v, %v, %v; want busy with the claim %+v", got.rec, got.claimed, got.err, won)
	}
	if n := commits.Load() - before; n != 0 {
		t.Fatalf("the late Claim sent %d commits; want none", n)
	}
}
