package firestorestore_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// docSize counts a record document as Firestore's storage-size page does,
// spelled out field by field: the document name (collection id and
// document id, each a string of bytes + 1, and 16), each field's name
// (bytes + 1) and value (a string: bytes + 1; bytes: their length; an
// integer or a timestamp: 8), and 32. The write id is a 22-character
// string.
func docSize(collection, key, fp string, response int) int {
	name := len(collection) + 1 + len(firestorelock.DocID(key)) + 1 + 16
	fields := len("key") + 1 + len(key) + 1 + // key and fingerprint are valid UTF-8 here: strings
		len("fingerprint") + 1 + len(fp) + 1 +
		len("response") + 1 + response +
		len("state") + 1 + 8 +
		len("fence") + 1 + 8 +
		len("createdAt") + 1 + 8 +
		len("expiresAt") + 1 + 8 +
		len("expireAt") + 1 + 8 +
		len("writeId") + 1 + 22 + 1
	return name + fields + 32
}

// TestResponseSizeLimit puts the largest response that fits a record
// document within the store's margin, and one byte more: the first is
// stored and read back, the second refused with store.ErrTooLarge
// before any write, for keys of several lengths.
func TestResponseSizeLimit(t *testing.T) {
	t.Parallel()
	c := firestoretest.Client(t, testenv.FirestoreProject(t))
	s := newStore(t, c)
	ctx := t.Context()
	fp := "sha256-v1:" + strings.Repeat("ab", 32)
	for _, key := range []string{"k", "orders/" + strings.Repeat("x", 500), strings.Repeat("\u00e9", store.MaxKeyBytes/2)} {
		limit := firestorestore.MaxDocumentBytes - firestorestore.DocumentMargin - docSize(firestorestore.DefaultCollection, key, fp, 0)
		if got := s.MaxResponseBytes(key, fp); got != limit {
			t.Fatalf("MaxResponseBytes = %d; want %d by Firestore's count", got, limit)
		}
		rec := store.Record{Key: key, Fingerprint: fp, State: store.StateCompleted, Fence: 1, Response: bytes.Repeat([]byte{0xa5}, limit)}
		if ok, err := s.Put(ctx, rec, time.Hour); err != nil || !ok {
			t.Fatalf("a %d-byte response (the limit): %v, %v", limit, ok, err)
		}
		got, ok, err := s.Get(ctx, key)
		if err != nil || !ok || !bytes.Equal(got.Response, rec.Response) {
			t.Fatalf("the %d-byte response did not round-trip: %v, %v", limit, ok, err)
		}
		rec.Fence, rec.Response = 2, append(rec.Response, 0)
		ok, err = s.Put(ctx, rec, time.Hour)
		if ok || !errors.Is(err, store.ErrTooLarge) || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("a response one byte over the limit: %v, %v; want InvalidArgument matching store.ErrTooLarge", ok, err)
		}
		if got, _, _ := s.Get(ctx, key); got.Fence != 1 {
			t.Fatalf("a refused Put changed the record (fence %d)", got.Fence)
		}
	}
}

// TestFirestoreRefusesTooLarge lets the store send documents past its own
// limit: Firestore (the emulator) takes a document of exactly
// MaxDocumentBytes by the store's count and refuses one more byte with
// InvalidArgument, which the store reports as store.ErrTooLarge, with the
// native status reachable.
func TestFirestoreRefusesTooLarge(t *testing.T) {
	t.Parallel()
	c := firestoretest.Client(t, testenv.FirestoreProject(t))
	s := newStore(t, c)
	firestorestore.SetDocumentLimit(s, firestorestore.MaxDocumentBytes+firestorestore.DocumentMargin)
	ctx := t.Context()
	const key, fp = "big", "fp"
	exact := firestorestore.MaxDocumentBytes - docSize(firestorestore.DefaultCollection, key, fp, 0)
	rec := store.Record{Key: key, Fingerprint: fp, State: store.StateCompleted, Fence: 1, Response: make([]byte, exact)}
	if ok, err := s.Put(ctx, rec, time.Hour); err != nil || !ok {
		t.Fatalf("a document of exactly %d bytes: %v, %v", firestorestore.MaxDocumentBytes, ok, err)
	}
	rec.Response = make([]byte, exact+1)
	ok, err := s.Put(ctx, rec, time.Hour)
	if ok || !errors.Is(err, store.ErrTooLarge) || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("a document one byte over: %v, %v; want InvalidArgument matching store.ErrTooLarge", ok, err)
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("the native status is not reachable: %v", err)
	}
	if strings.Contains(err.Error(), key) && strings.Contains(err.Error(), "documents/") {
		t.Fatalf("the error quotes the document name: %v", err)
	}
}

// TestGuardRecordsTooLargeAsNotReplayable runs a guard whose work answers
// more than a record document holds: the execution is recorded as not
// replayable, and a retry is told so without running the work again.
func TestGuardRecordsTooLargeAsNotReplayable(t *testing.T) {
	t.Parallel()
	c := firestoretest.Client(t, testenv.FirestoreProject(t))
	s := newStore(t, c)
	l, err := firestorelock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	g, err := middleware.New(s, l, middleware.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	fp, err := fingerprint.Value("a big report")
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	work := func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{Value: make([]byte, firestorestore.MaxDocumentBytes)}, nil
	}
	out, err := g.Execute(t.Context(), "report-1", fp, work)
	if err != nil || out.Replayed || !out.Recorded || len(out.Value) != firestorestore.MaxDocumentBytes {
		t.Fatalf("first execution: recorded %v, replayed %v, %d bytes, %v", out.Recorded, out.Replayed, len(out.Value), err)
	}
	_, err = g.Execute(t.Context(), "report-1", fp, work)
	if !errors.Is(err, middleware.ErrNotReplayable) {
		t.Fatalf("retry: %v; want ErrNotReplayable", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the work ran %d times", n)
	}
}
