package guardtest

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
)

// SealKeys returns the keys of [Sealed]: current seals the record, and a
// node given only retired cannot open it. Conformance runs of sealed
// stores use them too.
func SealKeys() (current, retired store.SealKey) {
	return store.SealKey{ID: "2025-q3", Secret: []byte("sealed-records-test-key-q3-32by!")},
		store.SealKey{ID: "2025-q4", Secret: []byte("sealed-q4-16byte")}
}

// SealOverhead is how many bytes sealing under k adds to a response.
func SealOverhead(k store.SealKey) int { return 34 + len(k.ID) }

// Field is one part of a record as the server holds it: a field, column or
// hash entry's name and its bytes.
type Field struct {
	Name  string
	Value []byte
}

// sealedRecordKey is the record key of the guard's key in [Sealed], under
// the guard's default namespace.
const sealedRecordKey = "idempotency::payment-1"

// sealedResponse holds what must never reach a server in plain text.
const sealedResponse = `{"status":201,"body":{"card":"4242424242424242","email":"ada.lovelace@example.com"}}`

var sealedMarkers = []string{"4242424242424242", "ada.lovelace@example.com", "lovelace"}

// Sealed proves sealed records on a real backend. newStore returns a store
// on the backend through a client of its own (each call another node);
// raw reads the record with the given record key straight from the server,
// every field as the server holds it (a row's text form counts as a field
// too). A guard on store.Seal(newStore(t), current) executes once; the
// server then holds no trace of the response (nor its hex form) and a
// "response" field that is a sealed envelope of the expected size; a retry
// replays the response exactly; and a node given only the retired key
// answers unavailable, matching store.ErrUnsealable, without running the
// work again.
func Sealed(t *testing.T, newStore func(t *testing.T) store.Store, raw func(t *testing.T, recordKey string) []Field) {
	t.Helper()
	ctx := t.Context()
	current, retired := SealKeys()
	guard := func(k store.SealKey, opts ...middleware.Option) *middleware.Guard {
		s, err := store.Seal(newStore(t), k)
		if err != nil {
			t.Fatal(err)
		}
		g, err := middleware.New(s, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	fp := fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/payments", Body: []byte(`{"amount":1250}`)})
	var runs atomic.Int32
	fn := func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{Value: []byte(sealedResponse)}, nil
	}

	g := guard(current)
	out, err := g.Execute(ctx, "payment-1", fp, fn)
	if err != nil || out.Replayed || !out.Recorded || string(out.Value) != sealedResponse {
		t.Fatalf("first execution: %+v, %v", out, err)
	}

	var envelope []byte
	for _, f := range raw(t, sealedRecordKey) {
		for _, m := range sealedMarkers {
			if bytes.Contains(f.Value, []byte(m)) || bytes.Contains(f.Value, []byte(hex.EncodeToString([]byte(m)))) || bytes.Contains([]byte(f.Name), []byte(m)) {
				t.Fatalf("the server holds %q in plain text in the record's %q", m, f.Name)
			}
		}
		if f.Name == "response" {
			envelope = f.Value
		}
	}
	if want := len(sealedResponse) + SealOverhead(current); len(envelope) != want || !bytes.HasPrefix(envelope, []byte("\x89IKS\x01")) {
		t.Fatalf("the stored response is %d bytes starting %q; want a sealed envelope of %d bytes", len(envelope), envelope[:min(len(envelope), 5)], want)
	}

	out, err = g.Execute(ctx, "payment-1", fp, fn)
	if err != nil || !out.Replayed || string(out.Value) != sealedResponse {
		t.Fatalf("retry: %+v, %v", out, err)
	}

	// Another node, configured without the record's key.
	_, err = guard(retired, middleware.WithWaitBudget(0)).Execute(ctx, "payment-1", fp, fn)
	if !errors.Is(err, middleware.ErrUnavailable) || !errors.Is(err, store.ErrUnsealable) || idemkit.CodeOf(err) != idemkit.CodeInternal {
		t.Fatalf("a node without the record's key: %v; want ErrUnavailable wrapping store.ErrUnsealable", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the work ran %d times; want 1", n)
	}
}
