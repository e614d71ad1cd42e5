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
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// docSize counts an outcome's record document as Firestore's storage-size
// page does, spelled out field by field: the document name (collection id
// and document id, each a string of bytes + 1, and 16), each field's name
// (bytes + 1) and value (a string: bytes + 1; bytes: their length; an
// integer or a timestamp: 8), and 32. The write id is a 22-character
// string; an outcome has no createdAt field (its update time is when it
// was written).
func docSize(collection, key, fp string, response int) int {
	name := len(collection) + 1 + len(firestorestore.DocID(key)) + 1 + 16
	fields := len("key") + 1 + len(key) + 1 + // key and fingerprint are valid UTF-8 here: strings
		len("fingerprint") + 1 + len(fp) + 1 +
		len("response") + 1 + response +
		len("state") + 1 + 8 +
		len("fence") + 1 + 8 +
		len("ttlMicros") + 1 + 8 +
		len("expireAt") + 1 + 8 +
		len("writeId") + 1 + 22 + 1
	return name + fields + 32
}

// TestResponseSizeLimit completes a claim and puts a record with the
// largest response that fits a record document within the store's margin,
// and tries one byte more: the first is stored and read back, the second
// refused with store.ErrTooLarge before any write, for keys of several
// lengths.
func TestResponseSizeLimit(t *testing.T) {
	t.Parallel()
	c := client(t, testenv.FirestoreProject(t))
	s := newStore(t, c)
	ctx := t.Context()
	fp := "sha256-v1:" + strings.Repeat("ab", 32)
	for _, key := range []string{"k", "orders/" + strings.Repeat("x", 500), strings.Repeat("\u00e9", store.MaxKeyBytes/2)} {
		limit := firestorestore.MaxDocumentBytes - firestorestore.DocumentMargin - docSize(firestorestore.DefaultCollection, key, fp, 0)
		if got := firestorestore.MaxResponseBytes(s, key, fp); got != limit {
			t.Fatalf("MaxResponseBytes = %d; want %d by Firestore's count", got, limit)
		}
		claim, claimed, err := s.Claim(ctx, key, fp, time.Hour)
		if err != nil || !claimed {
			t.Fatalf("Claim: %v, %v", claimed, err)
		}
		over := store.Record{Key: key, Fingerprint: fp, State: store.StateCompleted, Fence: claim.Fence, Response: make([]byte, limit+1)}
		if ok, err := s.Complete(ctx, over, time.Hour); ok || !errors.Is(err, store.ErrTooLarge) || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("Complete with a response one byte over the limit: %v, %v; want InvalidArgument matching store.ErrTooLarge", ok, err)
		}
		if ok, err := s.Put(ctx, over, time.Hour); ok || !errors.Is(err, store.ErrTooLarge) {
			t.Fatalf("Put with a response one byte over the limit: %v, %v; want store.ErrTooLarge", ok, err)
		}
		if got, ok, _ := s.Get(ctx, key); !ok || got.State != store.StateClaimed {
			t.Fatalf("a refused write changed the claim: %+v, %v", got, ok)
		}
		out := over
		out.Response = bytes.Repeat([]byte{0xa5}, limit)
		if ok, err := s.Complete(ctx, out, time.Hour); err != nil || !ok {
			t.Fatalf("Complete with a %d-byte response (the limit): %v, %v", limit, ok, err)
		}
		got, ok, err := s.Get(ctx, key)
		if err != nil || !ok || !bytes.Equal(got.Response, out.Response) {
			t.Fatalf("the %d-byte response did not round-trip: %v, %v", limit, ok, err)
		}
		out.Fence++
		if ok, err := s.Put(ctx, out, time.Hour); err != nil || !ok {
			t.Fatalf("Put with a %d-byte response (the limit): %v, %v", limit, ok, err)
		}
	}
}

// TestFirestoreRefusesTooLarge lets the store send documents past its own
// limit: Firestore (the emulator) takes a document of exactly
// MaxDocumentBytes by the store's count and refuses one more byte with
// InvalidArgument, which the store reports as store.ErrTooLarge once a
// read shows the write did not land, with the native status reachable
// and no document name in the text.
func TestFirestoreRefusesTooLarge(t *testing.T) {
	t.Parallel()
	c := client(t, testenv.FirestoreProject(t))
	s := newStore(t, c)
	firestorestore.SetDocumentLimit(s, firestorestore.MaxDocumentBytes+firestorestore.DocumentMargin)
	ctx := t.Context()
	const key, fp = "big", "fp"
	exact := firestorestore.MaxDocumentBytes - docSize(firestorestore.DefaultCollection, key, fp, 0)
	claim, claimed, err := s.Claim(ctx, key, fp, time.Hour)
	if err != nil || !claimed {
		t.Fatalf("Claim: %v, %v", claimed, err)
	}
	out := store.Record{Key: key, Fingerprint: fp, State: store.StateCompleted, Fence: claim.Fence, Response: make([]byte, exact+1)}
	ok, err := s.Complete(ctx, out, time.Hour)
	if ok || !errors.Is(err, store.ErrTooLarge) || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("a document one byte over: %v, %v; want InvalidArgument matching store.ErrTooLarge", ok, err)
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("the native status is not reachable: %v", err)
	}
	if strings.Contains(err.Error(), "documents/") {
		t.Fatalf("the error quotes the document name: %v", err)
	}
	out.Response = out.Response[:exact]
	if ok, err := s.Complete(ctx, out, time.Hour); err != nil || !ok {
		t.Fatalf("a document of exactly %d bytes: %v, %v", firestorestore.MaxDocumentBytes, ok, err)
	}
}

// TestGuardRecordsTooLargeAsNotReplayable runs a guard whose work answers
// more than a record document holds: the execution is recorded as not
// replayable, and a retry is told so without running the work again.
func TestGuardRecordsTooLargeAsNotReplayable(t *testing.T) {
	t.Parallel()
	g := newGuard(t, client(t, testenv.FirestoreProject(t)))
	fp := fingerprint.New("test", [32]byte{4})
	var runs atomic.Int32
	work := func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{Value: make([]byte, firestorestore.MaxDocumentBytes)}, nil
	}
	out, err := g.Execute(t.Context(), "report-1", fp, work)
	if err != nil || out.Replayed || !out.Recorded || len(out.Value) != firestorestore.MaxDocumentBytes {
		t.Fatalf("first execution: recorded %v, replayed %v, %d bytes, %v", out.Recorded, out.Replayed, len(out.Value), err)
	}
	if _, err := g.Execute(t.Context(), "report-1", fp, work); !errors.Is(err, middleware.ErrNotReplayable) {
		t.Fatalf("retry: %v; want ErrNotReplayable", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the work ran %d times", n)
	}
}
