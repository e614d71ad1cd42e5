package store_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// complete claims key on s and completes it with response.
func complete(t *testing.T, s store.Store, key, fp string, response []byte, ttl time.Duration) store.Record {
	t.Helper()
	claim, claimed, err := s.Claim(t.Context(), key, fp, time.Minute)
	if err != nil || !claimed {
		t.Fatalf("Claim: %v, %v", claimed, err)
	}
	claim.State, claim.Response = store.StateCompleted, response
	if ok, err := s.Complete(t.Context(), claim, ttl); !ok || err != nil {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	return claim
}

// TestInspect: Inspect reads a record as it is, in each state, with the
// response only when asked for, and changes nothing.
func TestInspect(t *testing.T) {
	ctx := t.Context()
	s := memstore.New()
	if in, ok, err := store.Inspect(ctx, s, "absent", true); ok || err != nil || in.State != 0 || in.Response != nil {
		t.Fatalf("an absent record: %+v, %v, %v", in, ok, err)
	}

	claim, _, err := s.Claim(ctx, "running", "http-v2:fp", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	in, ok, err := store.Inspect(ctx, s, "running", true)
	if err != nil || !ok || in.State != store.StateClaimed || in.Fingerprint != "http-v2:fp" || in.Fence != claim.Fence ||
		in.ExpiresAt.Sub(in.CreatedAt) != 30*time.Second || in.Size != 0 || in.Sealed || in.Response != nil || in.Key != "running" {
		t.Fatalf("a claim: %+v, %v, %v", in, ok, err)
	}

	response := []byte(`{"id":7}`)
	done := complete(t, s, "done", "http-v2:fp", response, time.Hour)
	in, ok, err = store.Inspect(ctx, s, "done", false)
	if err != nil || !ok || in.State != store.StateCompleted || in.Fence != done.Fence || in.Size != len(response) || in.Sealed || in.Response != nil ||
		in.ExpiresAt.Sub(in.CreatedAt) != time.Hour {
		t.Fatalf("a completed record, without its response: %+v, %v, %v", in, ok, err)
	}
	in, _, _ = store.Inspect(ctx, s, "done", true)
	if !bytes.Equal(in.Response, response) || in.Size != len(response) {
		t.Fatalf("a completed record, with its response: %+v", in)
	}
	in.Response[0] = 'X' // the caller's copy
	if rec, _, _ := s.Get(ctx, "done"); !bytes.Equal(rec.Response, response) {
		t.Fatalf("the record changed to %q", rec.Response)
	}
	if rec, _, _ := s.Get(ctx, "running"); rec.State != store.StateClaimed || rec.Fence != claim.Fence {
		t.Fatalf("the claim changed: %+v", rec)
	}
}

// TestInspectSealed: through a sealed store a record is reported sealed,
// with the size of its envelope, its response opened when asked for;
// through the store under it, sealed and never with its response; through
// a store sealed with other keys, an ErrUnsealable error when its response
// is asked for. A response written before sealing is reported unsealed.
func TestInspectSealed(t *testing.T) {
	ctx := t.Context()
	current, retired := guardtest.SealKeys()
	inner := memstore.New()
	s, err := store.Seal(inner, current)
	if err != nil {
		t.Fatal(err)
	}
	other, err := store.Seal(inner, retired)
	if err != nil {
		t.Fatal(err)
	}
	response := []byte(`{"card":"4242424242424242"}`)
	complete(t, s, "sealed", "http-v2:fp", response, time.Hour)
	raw, _, _ := inner.Get(ctx, "sealed")
	size := len(response) + guardtest.SealOverhead(current)
	if len(raw.Response) != size {
		t.Fatalf("the envelope has %d bytes; want %d", len(raw.Response), size)
	}

	for _, c := range []struct {
		name         string
		s            store.Store
		withResponse bool
		response     []byte
		err          error
	}{
		{"sealed store, without the response", s, false, nil, nil},
		{"sealed store, with the response", s, true, response, nil},
		{"inner store, without the response", inner, false, nil, nil},
		{"inner store, with the response", inner, true, nil, nil},
		{"store sealed with other keys, without the response", other, false, nil, nil},
		{"store sealed with other keys, with the response", other, true, nil, store.ErrUnsealable},
	} {
		in, ok, err := store.Inspect(ctx, c.s, "sealed", c.withResponse)
		if c.err != nil {
			if ok || !errors.Is(err, c.err) || idemkit.CodeOf(err) != idemkit.CodeInternal || in.State != 0 {
				t.Fatalf("%s: %+v, %v, %v; want an error matching %v", c.name, in, ok, err, c.err)
			}
			continue
		}
		if err != nil || !ok || !in.Sealed || in.Size != size || in.State != store.StateCompleted || !bytes.Equal(in.Response, c.response) || (in.Response == nil) != (c.response == nil) {
			t.Fatalf("%s: %+v, %v, %v; want sealed, %d bytes, response %q", c.name, in, ok, err, size, c.response)
		}
	}

	// Written before sealing was turned on: not sealed, and it does not
	// open through the sealed store.
	complete(t, inner, "plain", "http-v2:fp", response, time.Hour)
	if in, ok, err := store.Inspect(ctx, s, "plain", false); err != nil || !ok || in.Sealed || in.Size != len(response) || in.Response != nil {
		t.Fatalf("a plain record through the sealed store: %+v, %v, %v", in, ok, err)
	}
	if _, ok, err := store.Inspect(ctx, s, "plain", true); ok || !errors.Is(err, store.ErrUnsealable) {
		t.Fatalf("a plain record's response through the sealed store: %v, %v; want ErrUnsealable, as Get gives", ok, err)
	}

	// An empty response is sealed too: its envelope authenticates the
	// outcome's state and fence.
	complete(t, s, "empty", "http-v2:fp", nil, time.Hour)
	if in, ok, err := store.Inspect(ctx, s, "empty", true); err != nil || !ok || !in.Sealed || in.Size != guardtest.SealOverhead(current) || len(in.Response) != 0 {
		t.Fatalf("an empty response: %+v, %v, %v", in, ok, err)
	}
}

// TestInspectFailure: a failing store is an error, not an absent record.
func TestInspectFailure(t *testing.T) {
	s := memstore.New()
	_ = s.Close()
	if _, ok, err := store.Inspect(t.Context(), s, "k", false); ok || !errors.Is(err, idemkit.ErrServiceUnavailable) {
		t.Fatalf("a closed store: %v, %v", ok, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, ok, err := store.Inspect(ctx, memstore.New(), "k", false); ok || !errors.Is(err, idemkit.ErrAborted) {
		t.Fatalf("an ended ctx: %v, %v", ok, err)
	}
}

// counting is a decorator over a store that says what it wraps.
type counting struct {
	store.Store
	gets int
}

func (c *counting) Get(ctx context.Context, key string) (store.Record, bool, error) {
	c.gets++
	return c.Store.Get(ctx, key)
}

func (c *counting) Unwrap() store.Store { return c.Store }

// TestInspectSeesThroughDecorators: a sealed store under a decorator with
// Unwrap is still inspected as sealed, with the envelope's size and the
// response opened; without Unwrap it is not.
func TestInspectSeesThroughDecorators(t *testing.T) {
	current, _ := guardtest.SealKeys()
	inner := memstore.New()
	s, err := store.Seal(inner, current)
	if err != nil {
		t.Fatal(err)
	}
	response := []byte("secret")
	complete(t, s, "k", "http-v2:fp", response, time.Hour)
	in, ok, err := store.Inspect(t.Context(), &counting{Store: s}, "k", true)
	if err != nil || !ok || !in.Sealed || in.Size != len(response)+guardtest.SealOverhead(current) || string(in.Response) != "secret" {
		t.Fatalf("through a decorator: %+v, %v, %v; want sealed, the envelope's size, the response opened", in, ok, err)
	}
	opaque := struct{ store.Store }{s}
	if in, ok, err := store.Inspect(t.Context(), opaque, "k", false); err != nil || !ok || in.Sealed || in.Size != len(response) {
		t.Fatalf("through a wrapper without Unwrap: %+v, %v, %v; want it seen as a plain store", in, ok, err)
	}
}
