package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

func TestValidate(t *testing.T) {
	long := strings.Repeat("k", store.MaxKeyBytes+1)
	out := store.Record{Key: "k", State: store.StateCompleted, Fence: 1}
	valid := []struct {
		name string
		err  error
	}{
		{"key of MaxKeyBytes", engine.ValidateKey(strings.Repeat("k", store.MaxKeyBytes))},
		{"key of any bytes", engine.ValidateKey("\x00\xff")},
		{"claim", errors.Join(engine.ValidateKey("k"), engine.ValidateTTL("claim", time.Millisecond))},
		{"fenced", engine.ValidateFenced("extend", "k", 1)},
		{"complete", engine.ValidateComplete(out, time.Millisecond)},
		{"complete not replayable", engine.ValidateComplete(store.Record{Key: "k", State: store.StateNotReplayable, Fence: 1}, time.Hour)},
		{"ttl", engine.ValidateTTL("op", time.Millisecond)},
	}
	for _, c := range valid {
		if c.err != nil {
			t.Errorf("%s: %v", c.name, c.err)
		}
	}
	mod := func(f func(r *store.Record)) store.Record { r := out; f(&r); return r }
	invalid := []struct {
		name string
		err  error
	}{
		{"empty key", engine.ValidateKey("")},
		{"long key", engine.ValidateKey(long)},
		{"claim with empty key", errors.Join(engine.ValidateKey(""), engine.ValidateTTL("claim", time.Second))},
		{"claim with zero ttl", errors.Join(engine.ValidateKey("k"), engine.ValidateTTL("claim", 0))},
		{"claim with sub-millisecond ttl", errors.Join(engine.ValidateKey("k"), engine.ValidateTTL("claim", time.Millisecond-1))},
		{"claim with negative ttl", errors.Join(engine.ValidateKey("k"), engine.ValidateTTL("claim", -time.Second))},
		{"fenced with long key", engine.ValidateFenced("release", long, 1)},
		{"fenced with zero fence", engine.ValidateFenced("release", "k", 0)},
		{"complete with empty key", engine.ValidateComplete(mod(func(r *store.Record) { r.Key = "" }), time.Second)},
		{"complete with zero fence", engine.ValidateComplete(mod(func(r *store.Record) { r.Fence = 0 }), time.Second)},
		{"complete with claimed state", engine.ValidateComplete(mod(func(r *store.Record) { r.State = store.StateClaimed }), time.Second)},
		{"complete with zero state", engine.ValidateComplete(mod(func(r *store.Record) { r.State = 0 }), time.Second)},
		{"complete with unknown state", engine.ValidateComplete(mod(func(r *store.Record) { r.State = 9 }), time.Second)},
		{"complete with zero ttl", engine.ValidateComplete(out, 0)},
	}
	for _, c := range invalid {
		if idemkit.CodeOf(c.err) != idemkit.CodeInvalidArgument {
			t.Errorf("%s: %v; want InvalidArgument", c.name, c.err)
		} else if strings.Contains(c.err.Error(), long[:40]) {
			t.Errorf("%s: the message repeats the key", c.name)
		}
	}
}

func TestTooLarge(t *testing.T) {
	err := engine.TooLarge("complete", 10, 5)
	if !errors.Is(err, store.ErrTooLarge) || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("TooLarge = %v; want InvalidArgument matching ErrTooLarge", err)
	}
}

func TestReadyFirstFailedCheckThenContext(t *testing.T) {
	bad := engine.ValidateKey("")
	if err := engine.Ready(t.Context(), "claim", nil, bad, engine.ValidateTTL("claim", 0)); err != bad {
		t.Fatalf("Ready = %v; want the first failed check, %v", err, bad)
	}
	if err := engine.Ready(t.Context(), "claim", nil); err != nil {
		t.Fatalf("Ready with passing checks and a live ctx = %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := engine.Ready(ctx, "claim"); idemkit.CodeOf(err) != idemkit.CodeAborted {
		t.Fatalf("Ready on a cancelled ctx = %v; want Aborted", err)
	}
}
