package firestorelock_test

import (
	"sync/atomic"
	"testing"
	"time"

	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
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
	if !ok || method != commitMethod || !f.armed.Load() || !f.match(r) {
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
// client whose commit answers f loses, holding a lease on "k" for ttl,
// with f armed (every commit, answered Unavailable).
func armedLostAnswer(t *testing.T, ttl time.Duration) (p string, l *firestorelock.Locker, f *lostAnswer, lease lock.Lease) {
	t.Helper()
	p = project(t)
	f = lose(nil)
	l = faultyLocker(t, p, f.intercept)
	lease = acquireOK(t, l, "k", ttl)
	f.armed.Store(true)
	return p, l, f, lease
}

// expiredLease leaves an expired lease on "k" in project p, written by a
// locker of its own, and returns it.
func expiredLease(t *testing.T, p string) lock.Lease {
	t.Helper()
	first := acquireOK(t, newLocker(t, p), "k", margin)
	outlive(first.ExpiresAt)
	return first
}

// TestReplaceCommitAnswerLost takes over an expired lease through a
// transaction whose commit lands but whose answer is lost: the client
// retries the commit of the closed transaction and gets InvalidArgument,
// and the acquire must still return the lease it stored (not an
// InvalidArgument error, which would leave the key locked by a lease
// nobody holds until it expired).
func TestReplaceCommitAnswerLost(t *testing.T) {
	t.Parallel()
	p := project(t)
	f := lose(transactional)
	l := faultyLocker(t, p, f.intercept)
	first := expiredLease(t, p)

	f.armed.Store(true)
	lease := acquireOK(t, l, "k", time.Minute)
	if n := f.commits.Load(); n < 2 {
		t.Fatalf("%d transactional commits; want the client's retry of the lost one", n)
	}
	if lease.Fence <= first.Fence {
		t.Fatalf("fence %v; want above %v", lease.Fence, first.Fence)
	}
	info, ok, err := lock.LookupKeyRaw(t.Context(), l, "k")
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
	p := project(t)
	f := lose(transactional)
	f.fault = codes.Aborted
	l := faultyLocker(t, p, f.intercept)
	pr := newProbes(t, p, l)
	first := expiredLease(t, p)

	f.armed.Store(true)
	lease := acquireOK(t, l, "k", time.Minute)
	if lease.Fence <= first.Fence {
		t.Fatalf("fence %v; want above %v", lease.Fence, first.Fence)
	}
	if stored, err := pr.fence(t.Context(), "k"); err != nil || stored != lease.Fence {
		t.Fatalf("stored fence %v, %v; want %v (one takeover, not two)", stored, err, lease.Fence)
	}
	if out, err := l.ReleaseKey(t.Context(), "k", lease.ID); err != nil || !out.OK {
		t.Fatalf("ReleaseKey = %+v, %v; want the returned lease to be the stored one", out, err)
	}
}

// TestReleaseCommitAnswerLost loses the answer to a release's write after
// it landed: the client's retry fails its condition on the document the
// first try removed (or reduced to a tombstone), and the release, by id
// and by key, must still report OK.
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
			p, l, f, lease := armedLostAnswer(t, time.Minute)
			out, err := tc.release(l, lease)
			if err != nil || !out.OK {
				t.Fatalf("Release = %+v, %v; want OK (the lock was released)", out, err)
			}
			if n := f.commits.Load(); n < 2 {
				t.Fatalf("%d commits; want the client's retry of the lost one", n)
			}
			if stored, err := newProbes(t, p, l).stored(t.Context(), "k"); err != nil || stored {
				t.Fatalf("lease stored = %v, %v; want gone", stored, err)
			}
		})
	}
}

// TestReleaseAnswerLostAfterExpiry lets the lease run out while the
// release's write is in flight, and loses the answer: the lease is gone,
// but a sweep or a takeover could have removed an expired lease as well,
// so the release reports expired, not OK.
func TestReleaseAnswerLostAfterExpiry(t *testing.T) {
	t.Parallel()
	_, l, f, lease := armedLostAnswer(t, 2*margin)
	f.during = func() { outlive(lease.ExpiresAt) }
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
			_, l, f, lease := armedLostAnswer(t, time.Minute)
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

// TestExtendAcrossExpiry lets the lease run out while the extend's update,
// decided while it was live, is in flight. The update lands (its condition
// proves nobody took the lease over in between), so the extend reports
// OK, the stored lease carries the new expiry, and a contender finds the
// key locked.
func TestExtendAcrossExpiry(t *testing.T) {
	t.Parallel()
	p := project(t)
	var armed atomic.Bool
	var lease lock.Lease
	l := faultyLocker(t, p, func(method string, req any, call func() error) error {
		if _, ok := req.(*pb.CommitRequest); ok && method == commitMethod && armed.CompareAndSwap(true, false) {
			outlive(lease.ExpiresAt) // the lease runs out while the update travels
		}
		return call()
	})
	other := newLocker(t, p)
	lease = acquireOK(t, l, "k", 2*margin)
	armed.Store(true)
	out, err := l.Extend(t.Context(), lease.ID, time.Minute)
	if err != nil || !out.OK {
		t.Fatalf("Extend = %+v, %v; want OK (the update landed)", out, err)
	}
	if !time.Now().After(lease.ExpiresAt) {
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
