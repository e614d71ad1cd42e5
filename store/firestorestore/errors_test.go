package firestorestore_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
	"github.com/idemkit/idemkit/lock/firestorelock/firestoretest"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// TestContentionIsReported races Puts of one key through a store that
// tries each transaction once, so that Firestore's aborts for contention
// reach the caller: each is ServiceUnavailable with the Aborted status as
// its cause and no key in its text, and the fenced contract holds among
// the Puts that succeeded.
func TestContentionIsReported(t *testing.T) {
	t.Parallel()
	c := firestoretest.Client(t, testenv.FirestoreProject(t))
	s := newStore(t, c, firestorestore.WithTransactionAttempts(1))
	const writers = 16
	aborted := 0
	for round := 0; aborted == 0; round++ {
		if round == 10 {
			t.Fatal("ten rounds of 16 concurrent Puts of one key met no contention")
		}
		key := fmt.Sprint("secret-contended-", round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		highest := lock.Fence(0)
		start := make(chan struct{})
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				f := lock.Fence(i + 1)
				ok, err := s.Put(t.Context(), store.Record{Key: key, State: store.StateCompleted, Fence: f}, time.Hour)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					if ok {
						highest = max(highest, f)
					}
				case idemkit.CodeOf(err) == idemkit.CodeServiceUnavailable && status.Code(err) == codes.Aborted && errors.Is(err, idemkit.ErrServiceUnavailable):
					aborted++
					if strings.Contains(err.Error(), "secret") {
						t.Errorf("the error names the key: %v", err)
					}
				default:
					t.Errorf("Put: %v; want success or ServiceUnavailable caused by Aborted", err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if got, ok, err := s.Get(t.Context(), key); err != nil || !ok || got.Fence != highest {
			t.Fatalf("round %d: the record has fence %d (%v, %v); want %d, the highest that was stored", round, got.Fence, ok, err, highest)
		}
	}
	t.Logf("%d Puts aborted for contention", aborted)
}

// TestForeignDocuments checks that documents this package did not write,
// at a record's document id, are reported as Internal and never
// overwritten.
func TestForeignDocuments(t *testing.T) {
	t.Parallel()
	c := firestoretest.Client(t, testenv.FirestoreProject(t))
	s := newStore(t, c)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		data map[string]any
	}{
		{"no fields", map[string]any{"other": true}},
		{"another key", map[string]any{firestorestore.FieldKey: "someone else's key"}},
		{"state of another type", map[string]any{firestorestore.FieldKey: "foreign", firestorestore.FieldFingerprint: "fp", firestorestore.FieldState: "completed"}},
		{"unknown state", map[string]any{firestorestore.FieldKey: "foreign", firestorestore.FieldFingerprint: "fp", firestorestore.FieldState: int64(9)}},
		{"negative fence", map[string]any{firestorestore.FieldKey: "foreign", firestorestore.FieldFingerprint: "fp", firestorestore.FieldState: int64(1),
			firestorestore.FieldResponse: []byte("r"), firestorestore.FieldFence: int64(-1)}},
		{"no expiry", map[string]any{firestorestore.FieldKey: "foreign", firestorestore.FieldFingerprint: "fp", firestorestore.FieldState: int64(1),
			firestorestore.FieldResponse: []byte("r"), firestorestore.FieldFence: int64(1), firestorestore.FieldCreatedAt: time.Now()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := c.Collection(firestorestore.DefaultCollection).Doc(firestorelock.DocID("foreign"))
			if _, err := ref.Set(ctx, tc.data); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Get(ctx, "foreign"); idemkit.CodeOf(err) != idemkit.CodeInternal {
				t.Fatalf("Get: %v; want Internal", err)
			}
			ok, err := s.Put(ctx, store.Record{Key: "foreign", State: store.StateCompleted, Fence: 1}, time.Hour)
			if ok || idemkit.CodeOf(err) != idemkit.CodeInternal {
				t.Fatalf("Put: %v, %v; want Internal", ok, err)
			}
			snap, err := ref.Get(ctx)
			if err != nil || len(snap.Data()) != len(tc.data) {
				t.Fatalf("the foreign document was changed: %v", err)
			}
		})
	}
}
