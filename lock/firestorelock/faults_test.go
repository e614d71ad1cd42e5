package firestorelock_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
)

// before is an interceptor that returns f's error in place of the RPC, or
// lets it through when f returns nil.
func before(f func(method string, req any) error) interceptor {
	return func(method string, req any, call func() error) error {
		if err := f(method, req); err != nil {
			return err
		}
		return call()
	}
}

// faultyClient is a real client of the emulator whose connection passes
// every RPC through f first: fault injection by a wrapper, with the real
// server behind it.
func faultyClient(t testing.TB, project string, f interceptor) *firestore.Client {
	t.Helper()
	return client(t, project, intercept(f)...)
}

// faultyLocker is a warmed-up locker on faultyClient(t, project, f).
func faultyLocker(t testing.TB, project string, f interceptor, opts ...firestorelock.Option) *firestorelock.Locker {
	t.Helper()
	l, err := firestorelock.New(faultyClient(t, project, f), opts...)
	if err != nil {
		t.Fatal(err)
	}
	warm(t, l)
	return l
}

// TestReplaceContentionIsLocked makes every transactional commit fail with
// Aborted, as when contention outlasts the client's retries: the acquire
// over an expired lease reports "locked" (a result that lock.Do retries),
// not an error, and writes nothing.
func TestReplaceContentionIsLocked(t *testing.T) {
	t.Parallel()
	p := project(t)
	l := newLocker(t, p)
	pr := newProbes(t, p, l)
	var commits atomic.Int32
	faulty := faultyLocker(t, p, before(func(method string, req any) error {
		if r, ok := req.(*pb.CommitRequest); ok && method == commitMethod && len(r.GetTransaction()) > 0 {
			commits.Add(1)
			return status.Error(codes.Aborted, "injected: too much contention on these documents")
		}
		return nil
	}))
	ctx := t.Context()
	first := acquireOK(t, l, "k", margin)
	outlive(first.ExpiresAt)

	if _, ok, err := faulty.Acquire(ctx, "k", time.Minute); ok || err != nil {
		t.Fatalf("Acquire under exhausted contention = %v, %v; want locked, no error", ok, err)
	}
	if n := commits.Load(); n != firestore.DefaultTransactionMaxAttempts {
		t.Fatalf("%d transactional commits; want the client's %d attempts", n, firestore.DefaultTransactionMaxAttempts)
	}
	if f, err := pr.fence(ctx, "k"); err != nil || f != first.Fence {
		t.Fatalf("fence %v, %v; want %v (nothing written)", f, err, first.Fence)
	}
	if stored, err := pr.stored(ctx, "k"); err != nil || !stored {
		t.Fatalf("stored = %v, %v; want the expired lease kept", stored, err)
	}
	// A free key goes through the write-only Create, which is unaffected.
	acquireOK(t, faulty, "other", time.Minute)
	if lease := acquireOK(t, l, "k", time.Minute); lease.Fence <= first.Fence {
		t.Fatalf("fence %v; want above %v", lease.Fence, first.Fence)
	}
}

// TestErrorsFromServer makes the server's answer a given gRPC status,
// quoting the key, on every call (or on commits only) and checks that each
// operation returns the mapped code without quoting the key.
func TestErrorsFromServer(t *testing.T) {
	t.Parallel()
	const key = "secret-key/with/slashes"
	for _, tc := range []struct {
		name      string
		code      codes.Code
		commitsOn bool // inject on commits only (reads pass)
		want      idemkit.Code
	}{
		{"permission-denied", codes.PermissionDenied, false, idemkit.CodeAuthFailed},
		{"unauthenticated", codes.Unauthenticated, false, idemkit.CodeAuthFailed},
		{"resource-exhausted", codes.ResourceExhausted, false, idemkit.CodeRateLimited},
		{"failed-precondition", codes.FailedPrecondition, false, idemkit.CodeInvalidArgument},
		{"not-found", codes.NotFound, false, idemkit.CodeInvalidArgument},
		{"data-loss", codes.DataLoss, false, idemkit.CodeInternal},
		{"commit-permission-denied", codes.PermissionDenied, true, idemkit.CodeAuthFailed},
		// A commit refused as invalid that a read shows did not land is
		// transient, never a configuration error.
		{"commit-invalid-argument", codes.InvalidArgument, true, idemkit.CodeServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := project(t)
			good := newLocker(t, p)
			held := acquireOK(t, good, key, time.Hour)
			var on atomic.Bool
			l := faultyLocker(t, p, before(func(method string, _ any) error {
				if on.Load() && (!tc.commitsOn || method == commitMethod) {
					return status.Errorf(tc.code, "injected: document idemkit_locks/k:%s", key)
				}
				return nil
			}))
			ctx := t.Context()
			on.Store(true)
			check := func(what string, err error) {
				t.Helper()
				if idemkit.CodeOf(err) != tc.want {
					t.Fatalf("%s: %v; want %v", what, err, tc.want)
				}
				if s := err.Error(); strings.Contains(s, "secret-key") || strings.Contains(s, held.ID) {
					t.Fatalf("%s: the message quotes a raw identifier: %v", what, err)
				}
			}
			_, _, err := l.Acquire(ctx, "free/"+key, time.Minute)
			check("acquire", err)
			if tc.commitsOn {
				_, err = l.Release(ctx, held.ID)
				check("release", err)
				_, err = l.ExtendKey(ctx, key, held.ID, time.Hour)
				check("extend-key", err)
				return
			}
			_, err = l.Release(ctx, held.ID)
			check("release", err)
			_, err = l.ReleaseKey(ctx, key, held.ID)
			check("release-key", err)
			_, err = l.Extend(ctx, held.ID, time.Hour)
			check("extend", err)
			_, err = l.ExtendKey(ctx, key, held.ID, time.Hour)
			check("extend-key", err)
			_, err = l.IsLocked(ctx, key)
			check("is-locked", err)
			_, _, err = l.LookupKey(ctx, key)
			check("lookup-key", err)
			_, _, err = l.LookupID(ctx, held.ID)
			check("lookup-id", err)
			_, err = l.Sweep(ctx)
			check("sweep", err)
		})
	}
}

// TestAcquireCommitAnswerLost loses the answer to an acquire's Create
// after the server applied it: the client retries the commit, which meets
// the document its first try wrote (AlreadyExists), and the acquire must
// still return its lease rather than "locked" (which would strand the
// lock until it expired), with the fence the document carries.
func TestAcquireCommitAnswerLost(t *testing.T) {
	t.Parallel()
	p := project(t)
	var armed atomic.Bool
	var commits atomic.Int32
	l := faultyLocker(t, p, func(method string, req any, call func() error) error {
		err := call()
		if method == commitMethod && armed.Load() && commits.Add(1) == 1 && err == nil {
			return status.Error(codes.Unavailable, "injected: the answer was lost")
		}
		return err
	})
	pr := newProbes(t, p, l)
	armed.Store(true)
	lease := acquireOK(t, l, "k", time.Minute)
	if commits.Load() < 2 {
		t.Fatal("the client did not retry the commit")
	}
	if f, err := pr.fence(t.Context(), "k"); err != nil || f != lease.Fence {
		t.Fatalf("stored fence %v, %v; want the lease's %v", f, err, lease.Fence)
	}
	if out, err := l.Release(t.Context(), lease.ID); err != nil || !out.OK {
		t.Fatalf("Release = %+v, %v; want the recovered lease to be this call's", out, err)
	}
}

// TestTombstoneTakeoverCommitAnswerLost loses the answer to an acquire's
// conditional update of a tombstone: the client's retry fails its
// condition on the document its first try changed, and the acquire still
// returns the lease it wrote, with a fence above the tombstone's.
func TestTombstoneTakeoverCommitAnswerLost(t *testing.T) {
	t.Parallel()
	p := project(t)
	var armed atomic.Bool
	var commits atomic.Int32
	l := faultyLocker(t, p, func(method string, req any, call func() error) error {
		err := call()
		if method == commitMethod && armed.Load() && commits.Add(1) == 1 && err == nil {
			return status.Error(codes.Unavailable, "injected: the answer was lost")
		}
		return err
	})
	pr := newProbes(t, p, l)
	ahead := idemkit.Fence(time.Now().Add(24 * time.Hour).UnixMilli())
	if err := pr.raiseFence(t.Context(), "k", ahead); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	lease := acquireOK(t, l, "k", time.Minute)
	if commits.Load() < 2 {
		t.Fatal("the client did not retry the commit")
	}
	if lease.Fence != ahead+1 {
		t.Fatalf("fence %v; want %v", lease.Fence, ahead+1)
	}
	info, ok, err := lock.LookupKeyRaw(t.Context(), l, "k")
	if err != nil || !ok || info.ID != lease.ID || info.Fence != lease.Fence {
		t.Fatalf("stored lock %+v, %v, %v; want the returned lease", info, ok, err)
	}
}
