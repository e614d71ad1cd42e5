package firestorestore_test

import (
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// TestNewValidates checks that New refuses a missing client and every bad
// option with InvalidArgument, and accepts the bounds.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	c := client(t, testenv.FirestoreProject(t))
	for _, tc := range []struct {
		name   string
		client *firestore.Client
		opts   []firestorestore.Option
	}{
		{"nil client", nil, nil},
		{"empty collection", c, []firestorestore.Option{firestorestore.WithCollection("")}},
		{"collection with a slash", c, []firestorestore.Option{firestorestore.WithCollection("a/b")}},
		{"dot collection", c, []firestorestore.Option{firestorestore.WithCollection("..")}},
		{"reserved collection", c, []firestorestore.Option{firestorestore.WithCollection("__records__")}},
		{"long collection", c, []firestorestore.Option{firestorestore.WithCollection(strings.Repeat("c", 101))}},
		{"zero response limit", c, []firestorestore.Option{firestorestore.WithMaxResponseBytes(0)}},
		{"response limit past a document", c, []firestorestore.Option{firestorestore.WithMaxResponseBytes(firestorestore.MaxDocumentBytes + 1)}},
		{"zero sweep batch", c, []firestorestore.Option{firestorestore.WithSweepBatch(0)}},
		{"sweep batch too large", c, []firestorestore.Option{firestorestore.WithSweepBatch(firestorestore.MaxSweepBatch + 1)}},
		{"negative listeners", c, []firestorestore.Option{firestorestore.WithMaxListeners(-1)}},
		{"negative clock step", c, []firestorestore.Option{firestorestore.WithMaxClockStep(-time.Millisecond)}},
	} {
		if _, err := firestorestore.New(tc.client, tc.opts...); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Errorf("%s: New = %v; want InvalidArgument", tc.name, err)
		}
	}
	s, err := firestorestore.New(c, firestorestore.WithMaxResponseBytes(firestorestore.MaxDocumentBytes),
		firestorestore.WithSweepBatch(firestorestore.MaxSweepBatch), firestorestore.WithCollection("my.records-1"), firestorestore.WithLogger(nil),
		firestorestore.WithMaxListeners(0), firestorestore.WithMaxClockStep(0))
	if err != nil {
		t.Fatalf("New at the bounds: %v", err)
	}
	if _, claimed, err := s.Claim(t.Context(), "k", "fp", time.Minute); err != nil || !claimed {
		t.Fatalf("Claim = %v, %v", claimed, err)
	}
	if n := len(docs(t, c, "my.records-1")); n != 1 {
		t.Fatalf("%d documents in the collection set by WithCollection; want 1", n)
	}
}
