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
	"github.com/idemkit/idemkit/lock/firestorelock"
	"github.com/idemkit/idemkit/lock/firestorelock/firestoretest"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// commitFault stands between a client and the emulator for the commits of
// read-write transactions, once armed. When landed is set, the first such
// commit reaches the server and its success is then replaced by fault, as
// when the answer is lost on the way back; otherwise it is answered with
// fault without reaching the server. Later commits pass untouched.
type commitFault struct {
	fault   codes.Code
	landed  bool
	armed   atomic.Bool
	commits atomic.Int32 // transactional commits sent since armed
}

// faultyClient is a real client of the emulator whose transactional
// commits pass through f.
func faultyClient(t *testing.T, project string, f *commitFault) *firestore.Client {
	t.Helper()
	return firestoretest.Client(t, project, firestoretest.Intercept(func(_ string, req any, call func() error) error {
		r, ok := req.(*pb.CommitRequest)
		if !ok || len(r.GetTransaction()) == 0 || !f.armed.Load() || f.commits.Add(1) != 1 {
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

// TestPutCommitAnswerLost loses the answer to a Put's commit after it
// landed. With Unavailable, the client retries the commit of the closed
// transaction and gets InvalidArgument; with Aborted, it runs the
// transaction again. Either way Put must answer true with the record
// stored, not fail.
func TestPutCommitAnswerLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault codes.Code
	}{
		{"unavailable", codes.Unavailable},
		{"aborted", codes.Aborted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &commitFault{fault: tc.fault, landed: true}
			s := newStore(t, faultyClient(t, testenv.FirestoreProject(t), f))
			ctx := t.Context()
			rec := store.Record{Key: "k", Fingerprint: "fp", State: store.StateCompleted, Response: []byte("x"), Fence: 1}
			f.armed.Store(true)
			if ok, err := s.Put(ctx, rec, time.Hour); err != nil || !ok {
				t.Fatalf("Put = %v, %v; want true (the record landed)", ok, err)
			}
			if n := f.commits.Load(); n < 2 {
				t.Fatalf("%d transactional commits; want the client's retry of the lost one", n)
			}
			got, ok, err := s.Get(ctx, "k")
			if err != nil || !ok || got.Fence != 1 || !bytes.Equal(got.Response, rec.Response) {
				t.Fatalf("Get = %+v, %v, %v; want the record", got, ok, err)
			}
		})
	}
}

// TestPutCommitRefused answers a Put's commit with InvalidArgument without
// letting it reach the server: the read that settles it finds the record
// did not land. A large document is then reported as store.ErrTooLarge
// (Firestore refused its size), a small one as ServiceUnavailable
// (transient), never as a configuration error.
func TestPutCommitRefused(t *testing.T) {
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
			rec := store.Record{Key: "k", Fingerprint: "fp", State: store.StateCompleted, Response: make([]byte, tc.response), Fence: 1}
			f.armed.Store(true)
			ok, err := s.Put(ctx, rec, time.Hour)
			if ok || idemkit.CodeOf(err) != tc.want || errors.Is(err, store.ErrTooLarge) != tc.tooLarge {
				t.Fatalf("Put = %v, %v; want %v (too large: %v)", ok, err, tc.want, tc.tooLarge)
			}
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("the native status is not reachable: %v", err)
			}
			if _, ok, err := s.Get(ctx, "k"); err != nil || ok {
				t.Fatalf("Get = %v, %v; want no record", ok, err)
			}
		})
	}
}

// TestGuardLargeResponseCommitAnswerLost runs a guard whose work answers
// 600 KiB (it fits a record document, but is over half the limit) and
// loses the answer to the record's commit: the record landed, so the guard
// must not overwrite it as not replayable, and a retry replays the
// response without running the work again.
func TestGuardLargeResponseCommitAnswerLost(t *testing.T) {
	t.Parallel()
	p := testenv.FirestoreProject(t)
	f := &commitFault{fault: codes.Unavailable, landed: true}
	s := newStore(t, faultyClient(t, p, f), firestorestore.WithLogger(discard()))
	l, err := firestorelock.New(firestoretest.Client(t, p), firestorelock.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	g, err := middleware.New(s, l, middleware.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("a"), 600<<10)
	fp := fingerprint.New("test", [32]byte{7})
	var runs atomic.Int32
	work := func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{Value: body}, nil
	}
	f.armed.Store(true)
	out, err := g.Execute(t.Context(), "order-1", fp, work)
	if err != nil || !out.Recorded {
		t.Fatalf("first execution: recorded %v, %v", out.Recorded, err)
	}
	out, err = g.Execute(t.Context(), "order-1", fp, work)
	if err != nil || !out.Replayed || !bytes.Equal(out.Value, body) {
		t.Fatalf("retry: replayed %v, %d bytes, %v; want the 600 KiB response replayed", out.Replayed, len(out.Value), err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the work ran %d times", n)
	}
}

// TestDeleteCommitAnswerLost loses the answer to a Delete's commit after
// it landed: the client's retry of the closed transaction gets
// InvalidArgument, and Delete must still report that it removed a live
// record.
func TestDeleteCommitAnswerLost(t *testing.T) {
	t.Parallel()
	f := &commitFault{fault: codes.Unavailable, landed: true}
	s := newStore(t, faultyClient(t, testenv.FirestoreProject(t), f))
	ctx := t.Context()
	if ok, err := s.Put(ctx, store.Record{Key: "k", Fingerprint: "fp", State: store.StateCompleted, Fence: 1}, time.Hour); err != nil || !ok {
		t.Fatalf("Put = %v, %v", ok, err)
	}
	f.armed.Store(true)
	if deleted, err := s.Delete(ctx, "k"); err != nil || !deleted {
		t.Fatalf("Delete = %v, %v; want true (the live record was deleted)", deleted, err)
	}
	if _, ok, err := s.Get(ctx, "k"); err != nil || ok {
		t.Fatalf("Get = %v, %v; want no record", ok, err)
	}
}
