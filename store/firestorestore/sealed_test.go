package firestorestore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/firestorestore"
	"github.com/idemkit/idemkit/store/storetest"
)

// The sealed-record tests' keys, request and response: a response with
// card digits and an e-mail address that must never reach the server in
// plain text.
var (
	sealedKeyQ3 = store.SealKey{ID: "2025-q3", Secret: []byte("fs-sealed-records-key-q3-32byte!")}
	sealedKeyQ4 = store.SealKey{ID: "2025-q4", Secret: []byte("fs-sealed-key-q4")}
	sealedFP    = fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/payments", Body: []byte(`{"amount":1250}`)})
)

const sealedResponse = `{"status":201,"body":{"card":"4242424242424242","email":"ada.lovelace@example.com"}}`

// sealedMarkers are the parts of sealedResponse that must not appear on
// the server.
var sealedMarkers = []string{"4242424242424242", "ada.lovelace@example.com", "lovelace"}

// TestSealedRecordsOnFirestore runs a guard on a sealed Firestore store:
// the record's document on the emulator (every field, read with the
// Firestore client) holds no trace of the response, a retry replays it
// exactly without running fn again, and a guard whose keys no longer
// include the record's key answers unavailable (matching
// store.ErrUnsealable) without running fn.
func TestSealedRecordsOnFirestore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	project := testenv.FirestoreProject(t)
	newGuard := func(current store.SealKey, opts ...middleware.Option) *middleware.Guard {
		s, err := store.Seal(newStore(t, client(t, project), firestorestore.WithLogger(discard())), current)
		if err != nil {
			t.Fatal(err)
		}
		g, err := middleware.New(s, append([]middleware.Option{middleware.WithLogger(discard())}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g := newGuard(sealedKeyQ3)
	var runs atomic.Int32
	fn := func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{Value: []byte(sealedResponse)}, nil
	}

	out, err := g.Execute(ctx, "payment-1", sealedFP, fn)
	if err != nil || out.Replayed || !out.Recorded || string(out.Value) != sealedResponse {
		t.Fatalf("first execution: %+v, %v", out, err)
	}

	admin := client(t, project)
	snap, err := admin.Collection(firestorestore.DefaultCollection).Doc(firestorestore.DocID("idempotency:payment-1")).Get(ctx)
	if err != nil {
		t.Fatalf("reading the record's document: %v", err)
	}
	data := snap.Data()
	if data["state"] != int64(store.StateCompleted) {
		t.Fatalf("the record's document: %v; want a completed record", data)
	}
	for field, value := range data {
		var b []byte
		switch v := value.(type) {
		case []byte:
			b = v
		case string:
			b = []byte(v)
		default:
			b = []byte(fmt.Sprint(v))
		}
		for _, m := range sealedMarkers {
			if bytes.Contains(b, []byte(m)) || strings.Contains(field, m) {
				t.Fatalf("the emulator holds %q in plain text in the document's field %q", m, field)
			}
		}
	}
	env, _ := data["response"].([]byte)
	if len(env) != len(sealedResponse)+34+len(sealedKeyQ3.ID) || !bytes.HasPrefix(env, []byte("\x89IKS\x01")) {
		t.Fatalf("the stored response is %d bytes starting %q; want a sealed envelope of %d bytes", len(env), env[:min(len(env), 5)], len(sealedResponse)+34+len(sealedKeyQ3.ID))
	}

	out, err = g.Execute(ctx, "payment-1", sealedFP, fn)
	if err != nil || !out.Replayed || string(out.Value) != sealedResponse {
		t.Fatalf("retry: %+v, %v", out, err)
	}

	// Another node, configured without the record's key.
	retired := newGuard(sealedKeyQ4, middleware.WithWaitBudget(0))
	_, err = retired.Execute(ctx, "payment-1", sealedFP, fn)
	if !errors.Is(err, middleware.ErrUnavailable) || !errors.Is(err, store.ErrUnsealable) || idemkit.CodeOf(err) != idemkit.CodeInternal {
		t.Fatalf("a node without the record's key: %v; want ErrUnavailable wrapping store.ErrUnsealable", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times; want 1", n)
	}
}

// TestSealedConformance runs the store suite on a sealed store on the
// shared emulator, each case on a project of its own: sealing keeps the
// contract and adds no RPC. The response limit is the store's, less the
// envelope.
func TestSealedConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		rc := &rpcCounter{}
		c := client(t, testenv.FirestoreProject(t), intercept(func(method string, _ any, call func() error) error {
			rc.add(method)
			return call()
		})...)
		s, err := store.Seal(newStore(t, c, firestorestore.WithMaxResponseBytes(suiteMaxResponse)), sealedKeyQ4, sealedKeyQ3)
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.Env{
			Store:            s,
			Margin:           margin,
			Break:            func() { _ = c.Close() },
			MaxResponseBytes: suiteMaxResponse - 34 - len(sealedKeyQ4.ID),
			RoundTrips:       rc.total,
			MaxRoundTrips:    storetest.RoundTripLimits{Claim: 2, TakeOver: 2, Delete: 2},
			Keys: func(ctx context.Context) ([]string, error) {
				return unexpiring(ctx, c, firestorestore.DefaultCollection)
			},
		}
	})
}
