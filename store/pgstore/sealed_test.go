package pgstore

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/storetest"
)

// The sealed-record tests' keys, request and response: a response with
// card digits and an e-mail address that must never reach the server in
// plain text.
var (
	sealedKeyQ3 = store.SealKey{ID: "2025-q3", Secret: []byte("pg-sealed-records-key-q3-32byte!")}
	sealedKeyQ4 = store.SealKey{ID: "2025-q4", Secret: []byte("pg-sealed-key-q4")}
	sealedFP    = fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/payments", Body: []byte(`{"amount":1250}`)})
)

const sealedResponse = `{"status":201,"body":{"card":"4242424242424242","email":"ada.lovelace@example.com"}}`

// sealedMarkers are the parts of sealedResponse that must not appear on
// the server.
var sealedMarkers = []string{"4242424242424242", "ada.lovelace@example.com", "lovelace"}

// TestSealedRecordsOnPostgres runs a guard on a sealed PostgreSQL store:
// the record's row on the server (every column, the bytea ones as their
// bytes and the whole row as text) holds no trace of the response, a
// retry replays it exactly without running fn again, and a guard whose
// keys no longer include the record's key answers unavailable (matching
// store.ErrUnsealable) without running fn.
func TestSealedRecordsOnPostgres(t *testing.T) {
	ctx := t.Context()
	url := testenv.Postgres(t).URL
	admin := newPool(t, url, 2)
	opt := table(t, admin)
	newGuard := func(current store.SealKey, opts ...middleware.Option) (*Store, *middleware.Guard) {
		s, err := New(newPool(t, url, 4), opt)
		if err != nil {
			t.Fatal(err)
		}
		ss, err := store.Seal(s, current)
		if err != nil {
			t.Fatal(err)
		}
		g, err := middleware.New(ss, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return s, g
	}
	s, g := newGuard(sealedKeyQ3)
	var runs atomic.Int32
	fn := func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{Value: []byte(sealedResponse)}, nil
	}

	out, err := g.Execute(ctx, "payment-1", sealedFP, fn)
	if err != nil || out.Replayed || !out.Recorded || string(out.Value) != sealedResponse {
		t.Fatalf("first execution: %+v, %v", out, err)
	}

	var (
		state            int16
		fpBytes, env     []byte
		rowText, keyText string
	)
	err = admin.QueryRow(ctx, `SELECT r.key, r.fingerprint, r.state, r.response, r::text FROM `+tableOf(s)+` r WHERE r.key = $1`,
		storedKey("idempotency:payment-1")).Scan(&keyText, &fpBytes, &state, &env, &rowText)
	if err != nil {
		t.Fatalf("reading the record's row: %v", err)
	}
	if state != int16(store.StateCompleted) {
		t.Fatalf("the row's state is %d; want a completed record", state)
	}
	for _, m := range sealedMarkers {
		for what, b := range map[string][]byte{"key": []byte(keyText), "fingerprint": fpBytes, "response": env, "row": []byte(rowText)} {
			if bytes.Contains(b, []byte(m)) {
				t.Fatalf("the server holds %q in plain text in the row's %s", m, what)
			}
		}
		if bytes.Contains([]byte(rowText), []byte(hex.EncodeToString([]byte(m)))) {
			t.Fatalf("the server holds %q in plain text (hex in the row's text)", m)
		}
	}
	if len(env) != len(sealedResponse)+34+len(sealedKeyQ3.ID) || !bytes.HasPrefix(env, []byte("\x89IKS\x01")) {
		t.Fatalf("the stored response is %d bytes starting %q; want a sealed envelope of %d bytes", len(env), env[:min(len(env), 5)], len(sealedResponse)+34+len(sealedKeyQ3.ID))
	}

	out, err = g.Execute(ctx, "payment-1", sealedFP, fn)
	if err != nil || !out.Replayed || string(out.Value) != sealedResponse {
		t.Fatalf("retry: %+v, %v", out, err)
	}

	// Another node, configured without the record's key.
	_, retired := newGuard(sealedKeyQ4, middleware.WithWaitBudget(0))
	_, err = retired.Execute(ctx, "payment-1", sealedFP, fn)
	if !errors.Is(err, middleware.ErrUnavailable) || !errors.Is(err, store.ErrUnsealable) || idemkit.CodeOf(err) != idemkit.CodeInternal {
		t.Fatalf("a node without the record's key: %v; want ErrUnavailable wrapping store.ErrUnsealable", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times; want 1", n)
	}
}

// TestSealedConformance runs the store suite on a sealed store on the
// shared server: sealing keeps the contract and adds no round trip. The
// response limit is the store's, less the envelope.
func TestSealedConformance(t *testing.T) {
	const limit = 1 << 20
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		url := testenv.Postgres(t).URL
		admin := newPool(t, url, 2)
		opt := table(t, admin)
		var st statements
		pool := newPool(t, url, 8, traced(&st))
		s, err := New(pool, opt, WithMaxResponseBytes(limit))
		if err != nil {
			t.Fatal(err)
		}
		ss, err := store.Seal(s, sealedKeyQ4, sealedKeyQ3)
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.Env{
			Store: ss, Margin: margin, Break: pool.Close, MaxResponseBytes: limit - 34 - len(sealedKeyQ4.ID),
			RoundTrips: st.count, Keys: immortal(admin, s),
		}
	})
}
