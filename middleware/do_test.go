package middleware_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

type charge struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

type message struct {
	Customer string
	Amount   int
}

func TestDoRunsOnceAndReplaysTheValue(t *testing.T) {
	g := newGuard(t, memstore.New())
	var runs atomic.Int32
	fn := func(context.Context) (charge, error) {
		n := runs.Add(1)
		return charge{ID: "ch_" + string(rune('0'+n)), Amount: 42}, nil
	}
	msg := message{Customer: "c1", Amount: 42}
	v, replayed, err := middleware.Do(t.Context(), g, "msg-1", msg, fn)
	if err != nil || replayed || v.ID != "ch_1" {
		t.Fatalf("first: %+v %v %v", v, replayed, err)
	}
	v, replayed, err = middleware.Do(t.Context(), g, "msg-1", msg, fn)
	if err != nil || !replayed || v != (charge{ID: "ch_1", Amount: 42}) {
		t.Fatalf("redelivery: %+v %v %v; want the first charge replayed", v, replayed, err)
	}
	_, _, err = middleware.Do(t.Context(), g, "msg-1", message{Customer: "c1", Amount: 43}, fn)
	if !errors.Is(err, middleware.ErrMismatch) {
		t.Fatalf("another input with the key: %v", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times", runs.Load())
	}

	// Errors are not stored.
	boom := errors.New("gateway timeout")
	_, _, err = middleware.Do(t.Context(), g, "msg-2", nil, func(context.Context) (int, error) { return 0, boom })
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	n, replayed, err := middleware.Do(t.Context(), g, "msg-2", nil, func(context.Context) (int, error) { return 7, nil })
	if err != nil || replayed || n != 7 {
		t.Fatalf("retry after an error: %v %v %v", n, replayed, err)
	}

	// A value JSON cannot encode is recorded as not replayable.
	_, _, err = middleware.Do(t.Context(), g, "msg-3", nil, func(context.Context) (chan int, error) { return make(chan int), nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err = middleware.Do(t.Context(), g, "msg-3", nil, func(context.Context) (chan int, error) { return nil, nil }); !errors.Is(err, middleware.ErrNotReplayable) {
		t.Fatalf("retry of an unencodable value: %v", err)
	}
	// An input that cannot be fingerprinted is refused before anything runs.
	if _, _, err = middleware.Do(t.Context(), g, "msg-4", make(chan int), fn); err == nil {
		t.Fatal("an unencodable input was accepted")
	}
}

// TestDoReturnsNoValueWithAnError: whatever fn returned with its error,
// and whatever a record that cannot be decoded into T filled in before
// the decoding failed, Do returns T's zero value with the error.
func TestDoReturnsNoValueWithAnError(t *testing.T) {
	g := newGuard(t, memstore.New())
	ctx := t.Context()
	boom := errors.New("declined")
	v, replayed, err := middleware.Do(ctx, g, "failed", nil, func(context.Context) (charge, error) {
		return charge{ID: "ch_1", Amount: 42}, boom
	})
	if !errors.Is(err, boom) || replayed || v != (charge{}) {
		t.Fatalf("fn's error: %+v, replayed %v, %v; want the zero value and the error", v, replayed, err)
	}

	// A record whose amount is no int: encoding/json fills in the id
	// before it fails.
	if _, _, err := middleware.Do(ctx, g, "undecodable", nil, func(context.Context) (map[string]any, error) {
		return map[string]any{"id": "ch_2", "amount": "many"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	v, replayed, err = middleware.Do(ctx, g, "undecodable", nil, func(context.Context) (charge, error) {
		t.Error("a replay ran fn")
		return charge{}, nil
	})
	if !errors.Is(err, middleware.ErrUnavailable) || !replayed || v != (charge{}) {
		t.Fatalf("an undecodable record: %+v, replayed %v, %v; want the zero value and Unavailable", v, replayed, err)
	}
}
