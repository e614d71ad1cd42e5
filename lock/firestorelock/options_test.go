package firestorelock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
	"github.com/idemkit/idemkit/lock/firestorelock/firestoretest"
)

// TestNewRejects checks that New refuses bad options with InvalidArgument
// before any I/O: above all a fence-counter collection equal to the lock
// collection, which would let a lock document and a counter share an id.
func TestNewRejects(t *testing.T) {
	t.Parallel()
	c := firestoretest.Client(t, firestoretest.Project(t))
	for _, tc := range []struct {
		name string
		opts []firestorelock.Option
	}{
		{"same-collections", []firestorelock.Option{firestorelock.WithCollection("x"), firestorelock.WithFenceCollection("x")}},
		{"locks-named-like-default-fences", []firestorelock.Option{firestorelock.WithCollection(firestorelock.DefaultFenceCollection)}},
		{"fences-named-like-default-locks", []firestorelock.Option{firestorelock.WithFenceCollection(firestorelock.DefaultCollection)}},
		{"empty", []firestorelock.Option{firestorelock.WithCollection("")}},
		{"dot", []firestorelock.Option{firestorelock.WithCollection(".")}},
		{"dot-dot", []firestorelock.Option{firestorelock.WithFenceCollection("..")}},
		{"reserved", []firestorelock.Option{firestorelock.WithCollection("__locks__")}},
		{"slash", []firestorelock.Option{firestorelock.WithCollection("a/b")}},
		{"non-ascii", []firestorelock.Option{firestorelock.WithCollection("schlösser")}},
		{"too-long", []firestorelock.Option{firestorelock.WithCollection(strings.Repeat("c", 101))}},
		{"nil-clock", []firestorelock.Option{firestorelock.WithClock(nil)}},
		{"negative-skew-tolerance", []firestorelock.Option{firestorelock.WithSkewTolerance(-time.Second)}},
		{"sweep-batch-zero", []firestorelock.Option{firestorelock.WithSweepBatch(0)}},
		{"sweep-batch-too-big", []firestorelock.Option{firestorelock.WithSweepBatch(firestorelock.MaxSweepBatch + 1)}},
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

// TestCollections checks that configured collections are the ones used.
func TestCollections(t *testing.T) {
	t.Parallel()
	p := firestoretest.Project(t)
	l := newLocker(t, p, firestorelock.WithCollection("my-locks.v2"), firestorelock.WithFenceCollection("my_fences"),
		firestorelock.WithSweepBatch(firestorelock.MaxSweepBatch))
	if locks, fences := l.Collections(); locks != "my-locks.v2" || fences != "my_fences" {
		t.Fatalf("Collections() = %q, %q", locks, fences)
	}
	acquireOK(t, l, "k", time.Minute)
	c := firestoretest.Client(t, p)
	for _, tc := range []struct {
		name string
		want int
	}{{"my-locks.v2", 1}, {"my_fences", 1}, {firestorelock.DefaultCollection, 0}, {firestorelock.DefaultFenceCollection, 0}} {
		if n := count(t, c.Collection(tc.name)); n != tc.want {
			t.Fatalf("collection %s holds %d documents; want %d", tc.name, n, tc.want)
		}
	}
	if caps := l.Capabilities(); caps.Backend != "firestore" || !caps.Fencing || caps.TimeAuthority != lock.TimeClient {
		t.Fatalf("Capabilities() = %+v; want firestore, fencing, client time", caps)
	}
}
