package guardtest

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
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
func SealOverhead(k store.SealKey) int { return 51 + len(k.ID) }

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

// Tampering is a change made to a record straight on its server, behind
// the store's back. A zero field leaves its part of the record alone.
type Tampering struct {
	// State is the state to write (claimed, completed or not replayable);
	// Tombstone writes the backend's released or deleted state instead.
	State     store.State
	Tombstone bool
	// Expired moves the record's expiry (a claim's: its lease) into the
	// past, by the server's clock.
	Expired bool
	// Fence is added to the record's fence.
	Fence int64
	// Fingerprint replaces the record's fingerprint.
	Fingerprint string
}

// Tamper applies c to the record with the given record key, straight on
// the server.
type Tamper func(t *testing.T, recordKey string, c Tampering)

// sealedTamperings are the cases of [SealedTampering]: the change, the
// outcome that is tampered with (not replayable, or completed), and
// whether a retry is refused (else it gets the authentic outcome back).
var sealedTamperings = []struct {
	name          string
	notReplayable bool
	change        Tampering
	refused       bool
}{
	{name: "expiry moved into the past", change: Tampering{Expired: true}},
	{name: "state changed to a claim whose lease ran out", change: Tampering{State: store.StateClaimed, Expired: true}},
	{name: "state changed to a tombstone", change: Tampering{Tombstone: true}},
	{name: "state changed to a tombstone past its expiry", change: Tampering{Tombstone: true, Expired: true}},
	{name: "fence raised and expiry moved into the past", change: Tampering{Fence: 1 << 20, Expired: true}},
	{name: "fence lowered and state changed to a run-out claim", change: Tampering{Fence: -1, State: store.StateClaimed, Expired: true}},
	{name: "fence raised", change: Tampering{Fence: 1}, refused: true},
	{name: "fence lowered", change: Tampering{Fence: -1}, refused: true},
	{name: "completed outcome turned not replayable", change: Tampering{State: store.StateNotReplayable}, refused: true},
	{name: "fingerprint changed", change: Tampering{Fingerprint: "http-v1:" + strings.Repeat("0", 64)}, refused: true},
	{name: "not-replayable outcome flipped to completed", notReplayable: true, change: Tampering{State: store.StateCompleted}, refused: true},
	{name: "not-replayable outcome's fence raised", notReplayable: true, change: Tampering{Fence: 1}, refused: true},
	{name: "not-replayable outcome's expiry moved into the past", notReplayable: true, change: Tampering{Expired: true}},
	{name: "not-replayable outcome turned into a run-out claim", notReplayable: true, change: Tampering{State: store.StateClaimed, Expired: true}},
	{name: "not-replayable outcome turned into a tombstone", notReplayable: true, change: Tampering{Tombstone: true}},
}

// SealedTampering proves that no change made to a sealed record on the
// server makes a guard run its work again or replay something other than
// the authentic outcome. For each case, a guard on store.Seal(newStore(t),
// current) executes a request once (its outcome completed, or not
// replayable); tamper then changes the record on the server (its expiry,
// state, fence, fingerprint); and retries, from a guard on another store,
// never run the work: they get the authentic outcome (the response
// replayed, or "not replayable"), or, where the record no longer matches
// its envelope, an unavailable answer matching store.ErrUnsealable.
// A live claim written over an outcome makes a retry wait ("in progress")
// until its lease runs out; once it has, the outcome is restored.
func SealedTampering(t *testing.T, newStore func(t *testing.T) store.Store, tamper Tamper) {
	t.Helper()
	current, _ := SealKeys()
	guard := func() *middleware.Guard {
		s, err := store.Seal(newStore(t), current)
		if err != nil {
			t.Fatal(err)
		}
		g, err := middleware.New(s, middleware.WithWaitBudget(0))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	first, retries := guard(), guard()
	fp := fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/payments", Body: []byte(`{"amount":1250}`)})
	for i, c := range sealedTamperings {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			key := fmt.Sprintf("tampered-%d", i)
			var runs atomic.Int32
			fn := func(context.Context) (middleware.Result, error) {
				runs.Add(1)
				if c.notReplayable {
					return middleware.Result{Value: []byte(sealedResponse), NotReplayable: true}, nil
				}
				return middleware.Result{Value: []byte(sealedResponse)}, nil
			}
			if out, err := first.Execute(ctx, key, fp, fn); err != nil || out.Replayed || !out.Recorded {
				t.Fatalf("first execution: %+v, %v", out, err)
			}
			tamper(t, "idempotency::"+key, c.change)
			for try := range 3 {
				out, err := retries.Execute(ctx, key, fp, fn)
				switch {
				case runs.Load() != 1:
					t.Fatalf("retry %d: the work ran again (%d runs): %+v, %v", try, runs.Load(), out, err)
				case c.refused:
					if !errors.Is(err, middleware.ErrUnavailable) || !errors.Is(err, store.ErrUnsealable) || idemkit.CodeOf(err) != idemkit.CodeInternal || out.Value != nil {
						t.Fatalf("retry %d: %+v, %v; want an unavailable answer matching store.ErrUnsealable", try, out, err)
					}
				case c.notReplayable:
					if !errors.Is(err, middleware.ErrNotReplayable) || out.Value != nil {
						t.Fatalf("retry %d: %+v, %v; want the authentic outcome: not replayable", try, out, err)
					}
				default:
					if err != nil || !out.Replayed || string(out.Value) != sealedResponse {
						t.Fatalf("retry %d: %+v, %v; want the authentic response replayed", try, out, err)
					}
				}
			}
		})
	}

	// A live claim written over an outcome: busy until its lease runs
	// out, then the outcome is back.
	t.Run("state changed to a live claim", func(t *testing.T) {
		ctx := t.Context()
		var runs atomic.Int32
		fn := func(context.Context) (middleware.Result, error) {
			runs.Add(1)
			return middleware.Result{Value: []byte(sealedResponse)}, nil
		}
		if _, err := first.Execute(ctx, "tampered-live", fp, fn); err != nil {
			t.Fatal(err)
		}
		tamper(t, "idempotency::tampered-live", Tampering{State: store.StateClaimed})
		if out, err := retries.Execute(ctx, "tampered-live", fp, fn); !errors.Is(err, middleware.ErrInProgress) || runs.Load() != 1 {
			t.Fatalf("retry while the written claim is live: %+v, %v (%d runs); want in progress", out, err, runs.Load())
		}
		tamper(t, "idempotency::tampered-live", Tampering{Expired: true})
		if out, err := retries.Execute(ctx, "tampered-live", fp, fn); err != nil || !out.Replayed || string(out.Value) != sealedResponse || runs.Load() != 1 {
			t.Fatalf("retry once its lease ran out: %+v, %v (%d runs); want the authentic response replayed", out, err, runs.Load())
		}
	})
}
