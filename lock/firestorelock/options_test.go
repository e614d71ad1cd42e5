package firestorelock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock/firestorelock"
)

// TestNewRejects checks that New refuses bad options with InvalidArgument
// before any I/O.
func TestNewRejects(t *testing.T) {
	t.Parallel()
	c := client(t, project(t))
	for _, tc := range []struct {
		name string
		opts []firestorelock.Option
	}{
		{"empty", []firestorelock.Option{firestorelock.WithCollection("")}},
		{"dot", []firestorelock.Option{firestorelock.WithCollection(".")}},
		{"dot-dot", []firestorelock.Option{firestorelock.WithCollection("..")}},
		{"reserved", []firestorelock.Option{firestorelock.WithCollection("__locks__")}},
		{"slash", []firestorelock.Option{firestorelock.WithCollection("a/b")}},
		{"non-ascii", []firestorelock.Option{firestorelock.WithCollection("schlösser")}},
		{"too-long", []firestorelock.Option{firestorelock.WithCollection(strings.Repeat("c", 101))}},
		{"sweep-batch-zero", []firestorelock.Option{firestorelock.WithSweepBatch(0)}},
		{"sweep-batch-too-big", []firestorelock.Option{firestorelock.WithSweepBatch(firestorelock.MaxSweepBatch + 1)}},
		{"watch-limit-negative", []firestorelock.Option{firestorelock.WithWatchLimit(-1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := firestorelock.New(c, tc.opts...)
			if l != nil || !errors.Is(err, idemkit.ErrInvalidArgument) || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
				t.Fatalf("New = %v, %v; want InvalidArgument", l, err)
			}
		})
	}
	if l, err := firestorelock.New(nil); l != nil || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("New(nil) = %v, %v; want InvalidArgument", l, err)
	}
}

// TestCollection checks that the configured collection is the one used,
// and that it is the only one: there is no fence collection any more.
func TestCollection(t *testing.T) {
	t.Parallel()
	p := project(t)
	l := newLocker(t, p, firestorelock.WithCollection("my-locks.v2"), firestorelock.WithSweepBatch(firestorelock.MaxSweepBatch))
	lease := acquireOK(t, l, "k", time.Minute)
	if _, err := l.ReleaseKey(t.Context(), "k", lease.ID); err != nil {
		t.Fatal(err)
	}
	acquireOK(t, l, "k", time.Minute)
	c := client(t, p)
	if n := count(t, c.Collection("my-locks.v2")); n != 1 {
		t.Fatalf("the configured collection holds %d documents; want 1", n)
	}
	cols, err := c.Collections(t.Context()).GetAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(cols) != 1 || cols[0].ID != "my-locks.v2" {
		var names []string
		for _, col := range cols {
			names = append(names, col.ID)
		}
		t.Fatalf("collections %q; want only the configured one", names)
	}
	if caps := l.Capabilities(); caps.Backend != "firestore" || !caps.Fencing {
		t.Fatalf("Capabilities() = %+v; want firestore, fencing, server time", caps)
	}
}
