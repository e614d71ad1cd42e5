package firestorelock_test

import (
	"sync/atomic"
	"testing"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
	"github.com/idemkit/idemkit/lock/firestorelock/firestoretest"
)

// lostAnswer is an intercept that, once armed, lets the first commit that
// match accepts reach the server and then replaces the server's success
// with fault, as when the answer is lost on the way back: the commit has
// landed, and the client sees an error. Later commits pass untouched.
type lostAnswer struct {
	match   func(*pb.CommitRequest) bool
	fault   codes.Code
	armed   atomic.Bool
	commits atomic.Int32 // matching commits sent since armed
	during  func()       // when set, runs while the faulted commit is in flight
}

// lose returns an unarmed lostAnswer for the commits match accepts (all
// when nil), answering Unavailable.
func lose(match func(*pb.CommitRequest) bool) *lostAnswer {
	if match == nil {
		match = func(*pb.CommitRequest) bool { return true }
	}
	return &lostAnswer{match: match, fault: codes.Unavailable}
}

// transactional accepts the commits of read-write transactions.
func transactional(r *pb.CommitRequest) bool { return len(r.GetTransaction()) > 0 }

func (f *lostAnswer) intercept(method string, req any, call func() error) error {
	r, ok := req.(*pb.CommitRequest)
	if !ok || method != firestoretest.CommitMethod || !f.armed.Load() || !f.match(r) {
		return call()
	}
	first := f.commits.Add(1) == 1
	if first && f.during != nil {
		f.during()
	}
	err := call()
	if first && err == nil {
		return status.Error(f.fault, "injected: the answer to the commit was lost")
	}
	return err
}

// armedLostAnswer returns a locker in a project of the test's own (p) on a
// client whose commit answers f loses, holding a lease on "k" for a
// minute, with f armed (every commit, answered Unavailable).
func armedLostAnswer(t *testing.T) (p string, l *firestorelock.Locker, f *lostAnswer, lease lock.Lease) {
	t.Helper()
	p = firestoretest.Project(t)
	f = lose(nil)
	l, err := firestorelock.New(faultyClient(t, p, f.intercept))
	if err != nil {
		t.Fatal(err)
	}
	lease = acquireOK(t, l, "k", time.Minute)
	f.armed.Store(true)
	return p, l, f, lease
}

// TestReplaceCommitAnswerLost takes over an expired lease through a
// transaction whose commit lands but whose answer is lost: the client
// retries the commit of the closed transaction and gets InvalidArgument,
// and the acquire must still return the lease it stored (not an
// InvalidArgument error, which would leave the key locked by a lease
// nobody holds until it expired).
func TestReplaceCommitAnswerLost(t *testing.T) {
	t.Parallel()
	p := firestoretest.Project(t)
	clock := fakeclock.New()
	f := lose(transactional)
	l, err := firestorelock.New(faultyClient(t, p, f.intercept), firestorelock.WithClock(clock.Now), firestorelock.WithSkewTolerance(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	first := acquireOK(t, l, "k", time.Second)
	clock.Advance(2 * time.Second)

	f.armed.Store(true)
	lease := acquireOK(t, l, "k", time.Minute)
	if n := f.commits.Load(); n < 2 {
		t.Fatalf("%d transactional commits; want the client's retry of the lost one", n)
	}
	if lease.Fence != first.Fence+1 {
		t.Fatalf("fence %v; want %v", lease.Fence, first.Fence+1)
	}
	info, ok, err := lock.LookupKeyRaw(ctx, l, "k")
	if err != nil || !ok || info.ID != lease.ID || info.Fence != lease.Fence {
		t.Fatalf("stored lock %+v, %v, %v; want the returned lease", info, ok, err)
	}
}

// TestReplaceRerunFindsItsOwnLease makes the landed commit of a takeover
// answer Aborted: the client runs the transaction again, which finds the
// lease of its first run live, and the acquire returns that lease rather
// than "locked".
func TestReplaceRerunFindsItsOwnLease(t *testing.T) {
	t.Parallel()
	p := firestoretest.Project(t)
	clock := fakeclock.New()
	f := lose(transactional)
	f.fault = codes.Aborted
	l, err := firestorelock.New(faultyClient(t, p, f.intercept), firestorelock.WithClock(clock.Now), firestorelock.WithSkewTolerance(0))
	if err != nil {
		t.Fatal(err)
	}
	first := acquireOK(t, l, "k", time.Second)
	clock.Advance(2 * time.Second)

	f.armed.Store(true)
	lease := acquireOK(t, l, "k", time.Minute)
	if lease.Fence != first.Fence+1 {
		t.Fatalf("fence %v; want %v (one takeover, not two)", lease.Fence, first.Fence+1)
	}
	if out, err := l.ReleaseKey(t.Context(), "k", lease.ID); err != nil || !out.OK {
		t.Fatalf("ReleaseKey = %+v, %v; want the returned lease to be the stored one", out, err)
	}
}

// TestReleaseCommitAnswerLost loses the answer to a release's delete after
// it landed: the client's retry fails its condition on the removed
// document, and the release, by id and by key, must still report OK.
func TestReleaseCommitAnswerLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		release func(l *firestorelock.Locker, lease lock.Lease) (lock.Outcome, error)
	}{
		{"by-id", func(l *firestorelock.Locker, lease lock.Lease) (lock.Outcome, error) {
			return l.Release(t.Context(), lease.ID)
		}},
		{"by-key", func(l *firestorelock.Locker, lease lock.Lease) (lock.Outcome, error) {
			return l.ReleaseKey(t.Context(), lease.Key, lease.ID)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, l, f, lease := armedLostAnswer(t)
			out, err := tc.release(l, lease)
			if err != nil || !out.OK {
				t.Fatalf("Release = %+v, %v; want OK (the lock was released)", out, err)
			}
			if n := f.commits.Load(); n < 2 {
				t.Fatalf("%d commits; want the client's retry of the lost one", n)
			}
			if stored, err := newProbes(t, p, l).stored(t.Context(), "k"); err != nil || stored {
				t.Fatalf("lock document stored = %v, %v; want gone", stored, err)
			}
		})
	}
}

// TestReleaseAnswerLostAfterExpiry lets the lease run out (by the client
// clock) while the release's delete is in flight, and loses the answer:
// the document is gone, but a sweep or a takeover could have removed an
// expired lease as well, so the release reports expired, not OK.
func TestReleaseAnswerLostAfterExpiry(t *testing.T) {
	t.Parallel()
	p := firestoretest.Project(t)
	clock := fakeclock.New()
	f := lose(nil)
	f.during = func() { clock.Advance(2 * time.Second) }
	l, err := firestorelock.New(faultyClient(t, p, f.intercept), firestorelock.WithClock(clock.Now), firestorelock.WithSkewTolerance(0))
	if err != nil {
		t.Fatal(err)
	}
	lease := acquireOK(t, l, "k", time.Second)
	f.armed.Store(true)
	out, err := l.ReleaseKey(t.Context(), "k", lease.ID)
	if err != nil || out.OK || out.Reason != lock.ReasonExpired {
		t.Fatalf("ReleaseKey = %+v, %v; want expired", out, err)
	}
}

// TestExtendCommitAnswerLost loses the answer to an extend's update after
// it landed: the client's retry fails its condition on the document the
// first try changed, and the extend, by id and by key, reports OK with the
// expiry it wrote, settled by one read (no second update).
func TestExtendCommitAnswerLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		extend func(l *firestorelock.Locker, lease lock.Lease) (lock.Outcome, error)
	}{
		{"by-id", func(l *firestorelock.Locker, lease lock.Lease) (lock.Outcome, error) {
			return l.Extend(t.Context(), lease.ID, time.Hour)
		}},
		{"by-key", func(l *firestorelock.Locker, lease lock.Lease) (lock.Outcome, error) {
			return l.ExtendKey(t.Context(), lease.Key, lease.ID, time.Hour)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, l, f, lease := armedLostAnswer(t)
			out, err := tc.extend(l, lease)
			if err != nil || !out.OK || !out.ExpiresAt.After(lease.ExpiresAt) {
				t.Fatalf("Extend = %+v, %v; want OK with a later expiry", out, err)
			}
			if n := f.commits.Load(); n != 2 {
				t.Fatalf("%d commits; want 2 (the update and the client's retry)", n)
			}
			info, ok, err := l.LookupKey(t.Context(), "k")
			if err != nil || !ok || !info.ExpiresAt.Equal(out.ExpiresAt) {
				t.Fatalf("stored lock %+v, %v, %v; want expiry %v", info, ok, err, out.ExpiresAt)
			}
		})
	}
}

// TestExtendAcrossExpiry lets the lease run out (by the client clock)
// while the extend's update, sent while it was live, is in flight. The
// update lands (its condition proves nobody took the lease over in
// between), so the extend reports OK, the stored lease carries the new
// expiry, and a contender finds the key locked.
func TestExtendAcrossExpiry(t *testing.T) {
	t.Parallel()
	p := firestoretest.Project(t)
	clock := fakeclock.New()
	var armed atomic.Bool
	c := faultyClient(t, p, func(method string, req any, call func() error) error {
		if _, ok := req.(*pb.CommitRequest); ok && method == firestoretest.CommitMethod && armed.CompareAndSwap(true, false) {
			clock.Advance(2 * time.Second) // the lease runs out while the update travels
		}
		return call()
	})
	l, err := firestorelock.New(c, firestorelock.WithClock(clock.Now), firestorelock.WithSkewTolerance(0))
	if err != nil {
		t.Fatal(err)
	}
	other := fakeLocker(t, p, clock)
	lease := acquireOK(t, l, "k", time.Second)
	armed.Store(true)
	out, err := l.Extend(t.Context(), lease.ID, time.Minute)
	if err != nil || !out.OK {
		t.Fatalf("Extend = %+v, %v; want OK (the update landed)", out, err)
	}
	if !clock.Now().After(lease.ExpiresAt) {
		t.Fatal("the lease did not run out during the update")
	}
	info, ok, err := lock.LookupKeyRaw(t.Context(), other, "k")
	if err != nil || !ok || info.ID != lease.ID || !info.ExpiresAt.Equal(out.ExpiresAt) {
		t.Fatalf("stored lock %+v, %v, %v; want the lease with expiry %v", info, ok, err, out.ExpiresAt)
	}
	if _, ok, err := other.Acquire(t.Context(), "k", time.Minute); ok || err != nil {
		t.Fatalf("contender Acquire = %v, %v; want locked", ok, err)
	}
}
