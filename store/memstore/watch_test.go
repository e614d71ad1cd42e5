package memstore_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

var _ store.Watcher = (*memstore.Store)(nil)

// fired reports whether ch is closed.
func fired(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestWatchFiresWhenTheClaimEnds: a watch closes on Complete, Release and
// Delete of its key, never on another key's, nor on an extension.
func TestWatchFiresWhenTheClaimEnds(t *testing.T) {
	ctx := t.Context()
	for _, end := range []string{"complete", "release", "delete"} {
		t.Run(end, func(t *testing.T) {
			s := memstore.New()
			claim, _, err := s.Claim(ctx, "k", "fp", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			ch, stop := s.Watch(ctx, "k")
			defer stop()
			other, stopOther := s.Watch(ctx, "other")
			defer stopOther()
			if _, ok, err := s.Extend(ctx, "k", claim.Fence, time.Minute); !ok || err != nil {
				t.Fatal(ok, err)
			}
			if fired(ch) {
				t.Fatal("an extension fired the watch")
			}
			switch end {
			case "complete":
				claim.State, claim.Response = store.StateCompleted, []byte("r")
				_, err = s.Complete(ctx, claim, time.Minute)
			case "release":
				_, err = s.Release(ctx, "k", claim.Fence)
			case "delete":
				_, err = s.Delete(ctx, "k")
			}
			if err != nil {
				t.Fatal(err)
			}
			if !fired(ch) {
				t.Fatalf("%s did not fire the watch", end)
			}
			if fired(other) {
				t.Fatal("another key's watch fired")
			}
		})
	}
}

// TestWatchesShareOneChannel: a thousand watches of one key hold one
// entry; stopping them all frees it, and a refused release fires nothing.
func TestWatchesShareOneChannel(t *testing.T) {
	ctx := t.Context()
	s := memstore.New()
	claim, _, err := s.Claim(ctx, "k", "fp", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	stops := make([]func(), 1000)
	chans := make([]<-chan struct{}, 1000)
	for i := range stops {
		chans[i], stops[i] = s.Watch(ctx, "k")
	}
	if keys, n := memstore.Watched(s, "k"); keys != 1 || n != 1000 {
		t.Fatalf("watched keys %d, watches %d; want 1 and 1000", keys, n)
	}
	if ok, _ := s.Release(ctx, "k", claim.Fence+1); ok || fired(chans[0]) {
		t.Fatal("a refused release fired the watches")
	}
	for _, stop := range stops[:999] {
		stop()
		stop() // a second stop changes nothing
	}
	if keys, n := memstore.Watched(s, "k"); keys != 1 || n != 1 {
		t.Fatalf("after 999 stops: watched keys %d, watches %d; want 1 and 1", keys, n)
	}
	if ok, err := s.Release(ctx, "k", claim.Fence); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if !fired(chans[999]) || !fired(chans[0]) {
		t.Fatal("the release did not fire the shared channel")
	}
	stops[999]()
	if keys, _ := memstore.Watched(s, "k"); keys != 0 {
		t.Fatalf("watched keys %d after the release; want 0", keys)
	}
	stops[0]()
	_, stop := s.Watch(ctx, "k")
	stop()
	if keys, _ := memstore.Watched(s, "k"); keys != 0 {
		t.Fatalf("watched keys %d after a watch stopped unfired; want 0", keys)
	}
}
