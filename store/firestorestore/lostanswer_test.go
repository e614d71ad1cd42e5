package firestorestore_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// commitFault stands between a client and the emulator for its commits,
// once armed. When landed is set, the first commit reaches the server and
// its success is then replaced by fault, as when the answer is lost on the
// way back; the client retries it (Unavailable), and the retry meets the
// document the first try wrote. Otherwise the first commit is answered
// with fault without reaching the server. Later commits pass untouched.
type commitFault struct {
	fault   codes.Code
	landed  bool
	armed   atomic.Bool
	commits atomic.Int32 // commits sent since armed
}

// faultyClient is a real client of the emulator whose commits pass
// through f.
func faultyClient(t *testing.T, project string, f *commitFault) *firestore.Client {
	t.Helper()
	return client(t, project, intercept(func(_ string, req any, call func() error) error {
		if _, ok := req.(*pb.CommitRequest); !ok || !f.armed.Load() || f.commits.Add(1) != 1 {
			return call()
		}
		if f.landed {
			if err := call(); err != nil {
				return err
			}
		}
		return status.Error(f.fault, "injected: the answer to the commit was lost")
	})...)
}

// TestCommitAnswerLost loses the answer to the commit of each operation
// after it landed: the client retries the commit, the retry's
// precondition fails (the document is no longer as read), and the store
// settles the outcome by a read that finds its own write id. Each
// operation must answer that it took effect, and the record must show it.
func TestCommitAnswerLost(t *testing.T) {
	t.Parallel()
	const key = "order-1"
	claimed := func(t *testing.T, s *firestorestore.Store, ttl time.Duration) store.Record {
		t.Helper()
		rec, ok, err := s.Claim(t.Context(), key, "fp", ttl)
		if err != nil || !ok {
			t.Fatalf("Claim = %v, %v", ok, err)
		}
		return rec
	}
	for _, tc := range []struct {
		name string
		// setup prepares the key through s and returns the operation to
		// run with the fault armed, which reports whether it took effect.
		setup func(t *testing.T, s *firestorestore.Store) func(ctx context.Context) (bool, error)
		// check looks at the record afterwards.
		check func(t *testing.T, rec store.Record, ok bool)
	}{
		{"claim of a free key", func(t *testing.T, s *firestorestore.Store) func(context.Context) (bool, error) {
			return func(ctx context.Context) (bool, error) {
				_, ok, err := s.Claim(ctx, key, "fp", time.Hour)
				return ok, err
			}
		}, func(t *testing.T, rec store.Record, ok bool) {
			if !ok || rec.State != store.StateClaimed {
				t.Fatalf("record %+v, %v; want the claim", rec, ok)
			}
		}},
		{"claim that takes over", func(t *testing.T, s *firestorestore.Store) func(context.Context) (bool, error) {
			claimed(t, s, time.Millisecond)
			time.Sleep(50 * time.Millisecond)
			return func(ctx context.Context) (bool, error) {
				_, ok, err := s.Claim(ctx, key, "fp", time.Hour)
				return ok, err
			}
		}, func(t *testing.T, rec store.Record, ok bool) {
			if !ok || rec.State != store.StateClaimed {
				t.Fatalf("record %+v, %v; want the claim", rec, ok)
			}
		}},
		{"extend", func(t *testing.T, s *firestorestore.Store) func(context.Context) (bool, error) {
			c := claimed(t, s, time.Minute)
			return func(ctx context.Context) (bool, error) {
				_, ok, err := s.Extend(ctx, key, c.Fence, time.Hour)
				return ok, err
			}
		}, func(t *testing.T, rec store.Record, ok bool) {
			if !ok || rec.State != store.StateClaimed || rec.ExpiresAt.Sub(rec.CreatedAt) < time.Hour {
				t.Fatalf("record %+v, %v; want the extended claim", rec, ok)
			}
		}},
		{"complete", func(t *testing.T, s *firestorestore.Store) func(context.Context) (bool, error) {
			c := claimed(t, s, time.Minute)
			return func(ctx context.Context) (bool, error) {
				return s.Complete(ctx, store.Record{Key: key, Fingerprint: "fp", State: store.StateCompleted, Response: []byte("x"), Fence: c.Fence}, time.Hour)
			}
		}, func(t *testing.T, rec store.Record, ok bool) {
			if !ok || rec.State != store.StateCompleted || string(rec.Response) != "x" {
				t.Fatalf("record %+v, %v; want the outcome", rec, ok)
			}
		}},
		{"release", func(t *testing.T, s *firestorestore.Store) func(context.Context) (bool, error) {
			c := claimed(t, s, time.Minute)
			return func(ctx context.Context) (bool, error) { return s.Release(ctx, key, c.Fence) }
		}, func(t *testing.T, rec store.Record, ok bool) {
			if ok {
				t.Fatalf("record %+v after Release", rec)
			}
		}},
		{"delete", func(t *testing.T, s *firestorestore.Store) func(context.Context) (bool, error) {
			claimed(t, s, time.Minute)
			return func(ctx context.Context) (bool, error) { return s.Delete(ctx, key) }
		}, func(t *testing.T, rec store.Record, ok bool) {
			if ok {
				t.Fatalf("record %+v after Delete", rec)
			}
		}},
		{"put", func(t *testing.T, s *firestorestore.Store) func(context.Context) (bool, error) {
			return func(ctx context.Context) (bool, error) {
				return s.Put(ctx, store.Record{Key: key, Fingerprint: "fp", State: store.StateCompleted, Response: []byte("x"), Fence: 1}, time.Hour)
			}
		}, func(t *testing.T, rec store.Record, ok bool) {
			if !ok || rec.State != store.StateCompleted || string(rec.Response) != "x" {
				t.Fatalf("record %+v, %v; want the outcome", rec, ok)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &commitFault{fault: codes.Unavailable, landed: true}
			s := newStore(t, faultyClient(t, testenv.FirestoreProject(t), f))
			op := tc.setup(t, s)
			f.armed.Store(true)
			if ok, err := op(t.Context()); err != nil || !ok {
				t.Fatalf("%s = %v, %v; want true (the write landed)", tc.name, ok, err)
			}
			if n := f.commits.Load(); n < 2 {
				t.Fatalf("%d commits; want the client's retry of the lost one", n)
			}
			rec, ok, err := s.Get(t.Context(), key)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, rec, ok)
		})
	}
}

// TestCompleteRefused answers a Complete's commit with InvalidArgument
// without letting it reach the server: the read that settles it finds
// the claim still there. A large document is then reported as
// store.ErrTooLarge (Firestore refused its size), a small one as
// ServiceUnavailable (transient), never as a configuration error, and the
// claim can still complete.
func TestCompleteRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		response int
		want     idemkit.Code
		tooLarge bool
	}{
		{"small", 1, idemkit.CodeServiceUnavailable, false},
		{"large", 600 << 10, idemkit.CodeInvalidArgument, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &commitFault{fault: codes.InvalidArgument}
			s := newStore(t, faultyClient(t, testenv.FirestoreProject(t), f))
			ctx := t.Context()
			c, claimed, err := s.Claim(ctx, "secret-key", "fp", time.Hour)
			if err != nil || !claimed {
				t.Fatalf("Claim = %v, %v", claimed, err)
			}
			out := store.Record{Key: "secret-key", Fingerprint: "fp", State: store.StateCompleted, Response: make([]byte, tc.response), Fence: c.Fence}
			f.armed.Store(true)
			ok, err := s.Complete(ctx, out, time.Hour)
			if ok || idemkit.CodeOf(err) != tc.want || errors.Is(err, store.ErrTooLarge) != tc.tooLarge {
				t.Fatalf("Complete = %v, %v; want %v (too large: %v)", ok, err, tc.want, tc.tooLarge)
			}
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("the native status is not reachable: %v", err)
			}
			if bytes.Contains([]byte(err.Error()), []byte("secret")) {
				t.Fatalf("the error names the key: %v", err)
			}
			if got, ok, err := s.Get(ctx, "secret-key"); err != nil || !ok || got.State != store.StateClaimed {
				t.Fatalf("Get = %+v, %v, %v; want the claim", got, ok, err)
			}
			if ok, err := s.Complete(ctx, out, time.Hour); err != nil || !ok {
				t.Fatalf("Complete again = %v, %v", ok, err)
			}
		})
	}
}

// TestGuardLargeResponseCommitAnswerLost runs a guard whose work answers
// 600 KiB (it fits a record document, but is over half the limit) and
// loses the answer to the completion's commit: the outcome landed, so the
// guard must not overwrite it as not replayable, and a retry replays the
// response without running the work again.
func TestGuardLargeResponseCommitAnswerLost(t *testing.T) {
	t.Parallel()
	f := &commitFault{fault: codes.Unavailable, landed: true}
	c := faultyClient(t, testenv.FirestoreProject(t), f)
	g := newGuard(t, c)
	body := bytes.Repeat([]byte("a"), 600<<10)
	fp := fingerprint.New("test", [32]byte{7})
	var runs atomic.Int32
	work := func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		f.armed.Store(true) // the next commit is the completion's
		return middleware.Result{Value: body}, nil
	}
	out, err := g.Execute(t.Context(), "order-1", fp, work)
	if err != nil || !out.Recorded {
		t.Fatalf("first execution: recorded %v, %v", out.Recorded, err)
	}
	if n := f.commits.Load(); n < 2 {
		t.Fatalf("%d commits after the work; want the lost one and its retry", n)
	}
	out, err = g.Execute(t.Context(), "order-1", fp, work)
	if err != nil || !out.Replayed || !bytes.Equal(out.Value, body) {
		t.Fatalf("retry: replayed %v, %d bytes, %v; want the 600 KiB response replayed", out.Replayed, len(out.Value), err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the work ran %d times", n)
	}
}
