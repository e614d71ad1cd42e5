package firestorestore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/locktest"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// TestLockConformance runs the lock suite through the lock library over
// the store on the emulator, each case on a project of its own. The
// emulator keeps nothing across a restart, so the restart case is skipped.
func TestLockConformance(t *testing.T) {
	locktest.Run(t, func(t *testing.T, _ locktest.Config) *locktest.Env {
		c := client(t, testenv.FirestoreProject(t))
		s := newStore(t, c, firestorestore.WithLogger(discard()))
		return &locktest.Env{
			Store:  s,
			Margin: margin,
			RaiseFence: func(ctx context.Context, key string, f idemkit.Fence) error {
				return firestorestore.RaiseFence(ctx, s, key, f)
			},
			Fence: func(ctx context.Context, key string) (idemkit.Fence, error) {
				f, _, err := firestorestore.Stored(ctx, s, key)
				return f, err
			},
			Stored: func(ctx context.Context, key string) (bool, error) {
				_, stored, err := firestorestore.Stored(ctx, s, key)
				return stored, err
			},
			Keys: func(ctx context.Context) ([]string, error) {
				return unexpiring(ctx, c, firestorestore.DefaultCollection)
			},
			Break: func() { _ = c.Close() },
		}
	})
}

// newClient returns a lock Client over a store of its own on c.
func newClient(t testing.TB, c *firestore.Client) (*lock.Client, *firestorestore.Store) {
	t.Helper()
	s := newStore(t, c, firestorestore.WithLogger(discard()))
	l, err := lock.New(s)
	if err != nil {
		t.Fatal(err)
	}
	return l, s
}

// hourly is a Do back-off that never polls within a test: only a
// notification wakes the waiter.
var hourly = []lock.Option{lock.WithBackoff(idemkit.Backoff{Base: time.Hour, Max: time.Hour}), lock.WithTimeout(2 * time.Hour)}

// doAsync runs lock.Do on key through l until ctx ends, and reports its
// error and the lease it held.
func doAsync(ctx context.Context, l *lock.Client, key string, opts ...lock.Option) (<-chan error, <-chan lock.Lease) {
	errs, leases := make(chan error, 1), make(chan lock.Lease, 1)
	go func() {
		errs <- lock.Do(ctx, l, key, func(_ context.Context, lease lock.Lease) error {
			leases <- lease
			return nil
		}, opts...)
	}()
	return errs, leases
}

// TestLockRaceOfClients races 3 Clients, each with a Firestore client and
// store of its own (as separate processes), 3 goroutines each, on one key:
// a free key (several rounds, each lease released by another Client,
// which finds it by its id), a key whose lease ran out, and a key whose
// tombstone carries a fence ahead of the clock. Every round has exactly
// one holder, and fences grow.
func TestLockRaceOfClients(t *testing.T) {
	t.Parallel()
	project := testenv.FirestoreProject(t)
	clients := make([]*lock.Client, 3)
	var s0 *firestorestore.Store
	for i := range clients {
		var s *firestorestore.Store
		clients[i], s = newClient(t, client(t, project))
		if i == 0 {
			s0 = s
		}
	}
	race := func(key string, ttl time.Duration) []lock.Lease {
		t.Helper()
		var (
			mu     sync.Mutex
			leases []lock.Lease
			wg     sync.WaitGroup
			start  = make(chan struct{})
		)
		for _, l := range clients {
			for range 3 {
				wg.Go(func() {
					<-start
					lease, ok, err := l.Acquire(t.Context(), key, ttl)
					if err != nil {
						t.Errorf("a contender got an error, not a result: %v", err)
						return
					}
					if ok {
						mu.Lock()
						leases = append(leases, lease)
						mu.Unlock()
					}
				})
			}
		}
		began := time.Now()
		close(start)
		wg.Wait()
		t.Logf("%s: %v", key, time.Since(began))
		if len(leases) != 1 {
			t.Fatalf("%s: %d holders; want exactly 1", key, len(leases))
		}
		return leases
	}
	var prev idemkit.Fence
	for round := range 3 {
		l := race("free", time.Hour)[0]
		if l.Fence <= prev {
			t.Fatalf("round %d: fence %v after %v; want greater", round, l.Fence, prev)
		}
		prev = l.Fence
		if st, err := clients[(round+1)%3].Release(t.Context(), l.ID); err != nil || !st.OK {
			t.Fatalf("round %d: another Client's release by id = %+v, %v", round, st, err)
		}
	}
	first, ok, err := clients[0].Acquire(t.Context(), "run-out", time.Second)
	if err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	time.Sleep(time.Second + margin)
	if l := race("run-out", time.Hour)[0]; l.Fence <= first.Fence {
		t.Fatalf("the lease after a run-out one has fence %v; want above %v", l.Fence, first.Fence)
	}
	ahead := idemkit.Fence(time.Now().Add(24 * time.Hour).UnixMilli())
	if err := firestorestore.RaiseFence(t.Context(), s0, "tombstone", ahead); err != nil {
		t.Fatal(err)
	}
	if l := race("tombstone", time.Hour)[0]; l.Fence != ahead+1 {
		t.Fatalf("the lease over a tombstone has fence %v; want %v", l.Fence, ahead+1)
	}
}

// TestLockByIDFromAnotherProcess: a Client that did not issue a lease
// (another process, with a Firestore client of its own) looks it up,
// extends and releases it by its lock id alone, through the store's
// FindClaim; the issuer then finds it gone.
func TestLockByIDFromAnotherProcess(t *testing.T) {
	t.Parallel()
	project := testenv.FirestoreProject(t)
	a, _ := newClient(t, client(t, project))
	b, _ := newClient(t, client(t, project))
	ctx := t.Context()
	lease, ok, err := a.Acquire(ctx, "invoice:42", time.Minute)
	if err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	if info, ok, err := b.LookupID(ctx, lease.ID); err != nil || !ok || info.Fence != lease.Fence {
		t.Fatalf("LookupID from another process = %+v, %v, %v; want the lease", info, ok, err)
	}
	st, err := b.Extend(ctx, lease.ID, time.Hour)
	if err != nil || !st.OK || !st.ExpiresAt.After(lease.ExpiresAt.Add(30*time.Minute)) {
		t.Fatalf("Extend from another process = %+v, %v; want an hour's lease", st, err)
	}
	if st, err := b.Release(ctx, lease.ID); err != nil || !st.OK {
		t.Fatalf("Release from another process = %+v, %v", st, err)
	}
	if st, err := a.Release(ctx, lease.ID); err != nil || st.OK {
		t.Fatalf("the issuer's Release after another process released = %+v, %v; want not OK", st, err)
	}
	if locked, err := a.IsLocked(ctx, "invoice:42"); err != nil || locked {
		t.Fatalf("IsLocked = %v, %v; want free", locked, err)
	}
}

// TestLockStalledEmulator freezes an emulator of the test's own: every
// lock operation given a deadline returns a coded error within it, never
// hangs (the bound is generous for a busy machine), and the Client works
// again once the emulator resumes.
func TestLockStalledEmulator(t *testing.T) {
	t.Parallel()
	e := testenv.NewFirestore(t)
	l, _ := newClient(t, dial(t, e.Host, testenv.FirestoreProject(t)))
	warm, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	lease, ok, err := l.Acquire(warm, "held", time.Hour) // a fresh emulator's first answers can be slow
	if err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	resume := e.Stall(t)
	defer resume()
	const deadline = time.Second
	ops := map[string]func(ctx context.Context) error{
		"acquire":    func(ctx context.Context) error { _, _, err := l.Acquire(ctx, "free", time.Minute); return err },
		"release":    func(ctx context.Context) error { _, err := l.Release(ctx, lease.ID); return err },
		"extend":     func(ctx context.Context) error { _, err := l.Extend(ctx, lease.ID, time.Hour); return err },
		"is-locked":  func(ctx context.Context) error { _, err := l.IsLocked(ctx, "held"); return err },
		"lookup-key": func(ctx context.Context) error { _, _, err := l.LookupKey(ctx, "held"); return err },
		"lookup-id":  func(ctx context.Context) error { _, _, err := l.LookupID(ctx, "AAAAAAAAAAAAAAAAAAAAAA"); return err },
		"do": func(ctx context.Context) error {
			return lock.Do(ctx, l, "do", func(context.Context, lock.Lease) error { return nil })
		},
	}
	var wg sync.WaitGroup
	for name, op := range ops {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()
			start := time.Now()
			err := op(ctx)
			took := time.Since(start)
			switch idemkit.CodeOf(err) {
			case idemkit.CodeNetworkTimeout, idemkit.CodeServiceUnavailable, idemkit.CodeAcquisitionTimeout:
			default:
				t.Errorf("%s on a stalled emulator: %v; want a coded timeout", name, err)
			}
			if took > deadline+2*time.Second {
				t.Errorf("%s took %v on a stalled emulator with a %v deadline", name, took, deadline)
			}
		})
	}
	wg.Wait()
	resume()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if st, err := l.Release(ctx, lease.ID); err != nil || !st.OK {
		t.Fatalf("Release after the emulator resumed = %+v, %v", st, err)
	}
}

// TestLockCommitAnswersLost loses the answer to the commits of an acquire,
// an extension and a release after they landed (the client retries each,
// and the retry fails its own precondition): each answers that it took
// effect.
func TestLockCommitAnswersLost(t *testing.T) {
	t.Parallel()
	f := &commitFault{fault: codes.Unavailable, landed: true}
	l, _ := newClient(t, faultyClient(t, testenv.FirestoreProject(t), f))
	ctx := t.Context()
	f.armed.Store(true)
	lease, ok, err := l.Acquire(ctx, "k", time.Minute)
	if err != nil || !ok {
		t.Fatalf("Acquire whose answer was lost = %v, %v; want the lease", ok, err)
	}
	for _, op := range []string{"extend", "release"} {
		f.commits.Store(0)
		var st lock.Status
		if op == "extend" {
			st, err = l.Extend(ctx, lease.ID, time.Hour)
		} else {
			st, err = l.Release(ctx, lease.ID)
		}
		if err != nil || !st.OK || f.commits.Load() < 2 {
			t.Fatalf("%s whose answer was lost = %+v, %v (%d commits); want OK after the client's retry", op, st, err, f.commits.Load())
		}
	}
	if locked, err := l.IsLocked(ctx, "k"); err != nil || locked {
		t.Fatalf("IsLocked = %v, %v; want free", locked, err)
	}
}

// TestLockDoWokenByRelease: lock.Do waiters whose back-off is an hour get
// the lock as soon as another process releases it — only the key's
// snapshot listener can wake them — also after the listener's Listen
// stream broke: with Unavailable the client reopens it and resumes; with
// PermissionDenied the listener fails, wakes its waiter, which tries
// again and watches on a new listener.
func TestLockDoWokenByRelease(t *testing.T) {
	t.Parallel()
	for _, cut := range []codes.Code{codes.OK, codes.Unavailable, codes.PermissionDenied} {
		t.Run(cut.String(), func(t *testing.T) {
			t.Parallel()
			project := testenv.FirestoreProject(t)
			ls := &listens{}
			l, s := newClient(t, client(t, project, ls.dialOption()))
			holder, _ := newClient(t, client(t, project))
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			held, ok, err := holder.Acquire(ctx, "k", time.Hour)
			if err != nil || !ok {
				t.Fatalf("Acquire: %v, %v", ok, err)
			}
			errs, leases := doAsync(ctx, l, "k", hourly...)
			waiting := func() bool {
				got := firestorestore.Listeners(s)
				total, _ := got.Waiting()
				open, _ := ls.counts()
				return total == 1 && len(got.Ready) == 1 && open == 1
			}
			await(t, "the waiter's watch", waiting)
			if cut != codes.OK {
				started := firestorestore.Listeners(s).Started
				if n := ls.cut(cut); n != 1 {
					t.Fatalf("%d Listen streams cut; want 1", n)
				}
				await(t, "the waiter's watch again", func() bool {
					return waiting() && (firestorestore.Listeners(s).Started > started) == (cut == codes.PermissionDenied)
				})
			}
			if st, err := holder.Release(ctx, held.ID); err != nil || !st.OK {
				t.Fatalf("Release: %+v, %v", st, err)
			}
			if err := <-errs; err != nil {
				t.Fatalf("Do with an hour's back-off was not woken by the release: %v", err)
			}
			if got := <-leases; got.Fence <= held.Fence {
				t.Fatalf("the waiter's fence %v does not follow the holder's %v", got.Fence, held.Fence)
			}
		})
	}
}
