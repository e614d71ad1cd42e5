package firestorestore_test

import (
	"strings"
	"testing"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/firestorelock/firestoretest"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// TestNewValidates checks that New refuses a missing client and every bad
// option with InvalidArgument, and accepts the bounds.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	c := firestoretest.Client(t, testenv.FirestoreProject(t))
	for _, tc := range []struct {
		name   string
		client *firestore.Client
		opts   []firestorestore.Option
	}{
		{"nil client", nil, nil},
		{"empty collection", c, []firestorestore.Option{firestorestore.WithCollection("")}},
		{"collection with a slash", c, []firestorestore.Option{firestorestore.WithCollection("a/b")}},
		{"reserved collection", c, []firestorestore.Option{firestorestore.WithCollection("__records__")}},
		{"long collection", c, []firestorestore.Option{firestorestore.WithCollection(strings.Repeat("c", 101))}},
		{"nil clock", c, []firestorestore.Option{firestorestore.WithClock(nil)}},
		{"zero response limit", c, []firestorestore.Option{firestorestore.WithMaxResponseBytes(0)}},
		{"response limit past a document", c, []firestorestore.Option{firestorestore.WithMaxResponseBytes(firestorestore.MaxDocumentBytes + 1)}},
		{"zero sweep batch", c, []firestorestore.Option{firestorestore.WithSweepBatch(0)}},
		{"sweep batch past a commit", c, []firestorestore.Option{firestorestore.WithSweepBatch(firestorestore.MaxSweepBatch + 1)}},
		{"negative skew tolerance", c, []firestorestore.Option{firestorestore.WithSkewTolerance(-1)}},
		{"zero transaction attempts", c, []firestorestore.Option{firestorestore.WithTransactionAttempts(0)}},
		{"too many transaction attempts", c, []firestorestore.Option{firestorestore.WithTransactionAttempts(101)}},
	} {
		if _, err := firestorestore.New(tc.client, tc.opts...); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Errorf("%s: New = %v; want InvalidArgument", tc.name, err)
		}
	}
	s, err := firestorestore.New(c, firestorestore.WithMaxResponseBytes(firestorestore.MaxDocumentBytes),
		firestorestore.WithSweepBatch(firestorestore.MaxSweepBatch), firestorestore.WithTransactionAttempts(100),
		firestorestore.WithSkewTolerance(0), firestorestore.WithCollection("my.records-1"), firestorestore.WithLogger(nil))
	if err != nil {
		t.Fatalf("New at the bounds: %v", err)
	}
	if s.Collection() != "my.records-1" || s.Client() != c {
		t.Fatalf("Collection %q, Client %p", s.Collection(), s.Client())
	}
	if s, _ := firestorestore.New(c); s.Collection() != firestorestore.DefaultCollection {
		t.Fatalf("default collection %q", s.Collection())
	}
}
