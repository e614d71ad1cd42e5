package firestorelock_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// TestNoProcessClock checks that the package's code never reads the clock
// of the process it runs in: every lease is judged by Firestore's read
// times and written with expiries derived from them, so a client whose
// clock is off by any amount judges exactly as one whose clock is right.
// (With no client clock to consult there is none to skew; the test below
// shows the behaviour a skewed client-clock authority would get wrong.)
//
// Only the watches of watch.go may wait: timers that wake a waiter (at a
// lease's expiry, counted from a snapshot's read time) or stop an idle
// listener judge no lease; the acquire that follows a wake-up does, by
// Firestore's read time.
func TestNoProcessClock(t *testing.T) {
	t.Parallel()
	forbidden := map[string]bool{
		"Now": true, "Since": true, "Until": true, "After": true, "AfterFunc": true,
		"Tick": true, "NewTimer": true, "NewTicker": true, "Sleep": true,
	}
	waits := map[string]bool{"AfterFunc": true, "NewTimer": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		timePkg := "" // the name the file imports package time under
		for _, imp := range f.Imports {
			if imp.Path.Value == `"time"` {
				timePkg = "time"
				if imp.Name != nil {
					timePkg = imp.Name.Name
				}
			}
		}
		if timePkg == "" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == timePkg && forbidden[sel.Sel.Name] && !(name == "watch.go" && waits[sel.Sel.Name]) {
				t.Errorf("%s: time.%s reads the process clock; judge by Firestore's times", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no source files found: the test must run in the package's directory")
	}
}

// TestSkewedClockCannotTakeOverRenewedLease holds a lease renewed by
// lock.Do well past its first expiry and has a contender on another client
// look at it and try to take it over all along. At every look the lease's
// expiry lies less than 8 s after the contender's clock, so a contender
// judging by its own clock running 8 s fast would find it expired and take
// it over; this locker judges by Firestore's read times and answers
// "locked" every time.
func TestSkewedClockCannotTakeOverRenewedLease(t *testing.T) {
	t.Parallel()
	const (
		skew = 8 * time.Second
		ttl  = 4 * time.Second
		hold = 9 * time.Second // past two TTLs: only renewal keeps the lease
	)
	p := project(t)
	holder, contender := newLocker(t, p), newLocker(t, p)
	var first, last lock.Info
	tries := 0
	err := lock.Do(t.Context(), holder, "k", func(ctx context.Context, lease lock.Lease) error {
		for end := time.Now().Add(hold); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			info, ok, err := contender.LookupKey(ctx, "k")
			if err != nil || !ok || info.Fence != lease.Fence {
				t.Errorf("LookupKey = %v, %v, %v; want the holder's live lease", info, ok, err)
				return nil
			}
			if !time.Now().Add(skew).After(info.ExpiresAt) {
				t.Errorf("the lease runs until %v, more than %v ahead: a skewed clock would not take it over either", info.ExpiresAt, skew)
				return nil
			}
			if _, ok, err := contender.Acquire(ctx, "k", ttl); ok || err != nil {
				t.Errorf("contender Acquire = %v, %v; want locked", ok, err)
				return nil
			}
			if tries == 0 {
				first = info
			}
			last = info
			tries++
		}
		return nil
	}, lock.WithTTL(ttl), lock.WithRenewInterval(ttl/8))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if tries == 0 {
		t.Fatal("the contender never tried")
	}
	if !last.ExpiresAt.After(first.ExpiresAt.Add(ttl)) {
		t.Fatalf("the lease ran from %v to %v; want it renewed past its first expiry", first.ExpiresAt, last.ExpiresAt)
	}
	// Released: the contender takes it at once.
	acquireOK(t, contender, "k", ttl)
}

// TestLeaseTimesAreServerTimes checks where a lease's times come from: its
// start is the read time of the acquire's read, between the read times of
// probes sent before and after, its expiry that plus the TTL, and its
// fence, on a free key, the create time of its document in milliseconds.
func TestLeaseTimesAreServerTimes(t *testing.T) {
	t.Parallel()
	p := project(t)
	l := newLocker(t, p)
	pr := newProbes(t, p, l)
	ctx := t.Context()
	readTime := func() time.Time {
		t.Helper()
		ref, _, _ := pr.doc("elsewhere")
		snap, err := ref.Get(ctx)
		if snap == nil || snap.ReadTime.IsZero() {
			t.Fatalf("probe read: %v", err)
		}
		return snap.ReadTime
	}
	before := readTime()
	lease := acquireOK(t, l, "k", time.Minute)
	after := readTime()
	if lease.AcquiredAt.Before(before) || lease.AcquiredAt.After(after) {
		t.Fatalf("acquired at %v; want a server time between %v and %v", lease.AcquiredAt, before, after)
	}
	if !lease.ExpiresAt.Equal(lease.AcquiredAt.Add(time.Minute)) {
		t.Fatalf("expires at %v; want %v", lease.ExpiresAt, lease.AcquiredAt.Add(time.Minute))
	}
	snap, err := pr.read(ctx, "k")
	if err != nil || snap == nil {
		t.Fatalf("read: %v", err)
	}
	if want := idemkit.Fence(snap.CreateTime.UnixMilli()); lease.Fence != want {
		t.Fatalf("fence %v; want the create time in ms, %v", lease.Fence, want)
	}
}
