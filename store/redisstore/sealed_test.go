package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/idemkit/idemkit/store/storetest"
)

// The sealed-record tests' keys, request and response: a response with
// card digits and an e-mail address that must never reach the server in
// plain text.
var (
	sealedKeyQ3 = store.SealKey{ID: "2025-q3", Secret: []byte("redis-sealed-records-key-q3-32b!")}
	sealedKeyQ4 = store.SealKey{ID: "2025-q4", Secret: []byte("redis-sealed-q4!")}
	sealedFP    = fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/payments", Body: []byte(`{"amount":1250}`)})
)

const sealedResponse = `{"status":201,"body":{"card":"4242424242424242","email":"ada.lovelace@example.com"}}`

// sealedMarkers are the parts of sealedResponse that must not appear on
// the server.
var sealedMarkers = []string{"4242424242424242", "ada.lovelace@example.com", "lovelace"}

// TestSealedRecordsOnRedis runs a guard on a sealed Redis store, on a
// single node and on the cluster: the record's hash on the server (every
// field and value, read with HGETALL) holds no trace of the response, a
// retry replays it exactly without running fn again, and a guard whose
// keys no longer include the record's key answers unavailable (matching
// store.ErrUnsealable) without running fn.
func TestSealedRecordsOnRedis(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			c := b.newClient(t)
			rs := newStore(t, c)
			g := sealedGuard(t, rs, sealedKeyQ3)
			var runs atomic.Int32
			fn := func(context.Context) (middleware.Result, error) {
				runs.Add(1)
				return middleware.Result{Value: []byte(sealedResponse)}, nil
			}

			out, err := g.Execute(ctx, "payment-1", sealedFP, fn)
			if err != nil || out.Replayed || !out.Recorded || string(out.Value) != sealedResponse {
				t.Fatalf("first execution: %+v, %v", out, err)
			}

			rawHash, err := c.HGetAll(ctx, redisstore.RedisKey(rs, "idempotency:payment-1")).Result()
			if err != nil {
				t.Fatal(err)
			}
			if rawHash["state"] != "completed" {
				t.Fatalf("the record's hash on the server: %q; want a completed record", rawHash)
			}
			for field, value := range rawHash {
				for _, m := range sealedMarkers {
					if bytes.Contains([]byte(field+"\x00"+value), []byte(m)) {
						t.Fatalf("the server holds %q in plain text in the record's field %q", m, field)
					}
				}
			}
			if env := rawHash["response"]; len(env) != len(sealedResponse)+34+len(sealedKeyQ3.ID) || env[:5] != "\x89IKS\x01" {
				t.Fatalf("the stored response is %d bytes starting %q; want a sealed envelope of %d bytes", len(env), env[:min(len(env), 5)], len(sealedResponse)+34+len(sealedKeyQ3.ID))
			}

			out, err = g.Execute(ctx, "payment-1", sealedFP, fn)
			if err != nil || !out.Replayed || string(out.Value) != sealedResponse {
				t.Fatalf("retry: %+v, %v", out, err)
			}

			// Another node, configured without the record's key.
			retired := sealedGuard(t, newStore(t, b.newClient(t)), sealedKeyQ4, middleware.WithWaitBudget(0))
			_, err = retired.Execute(ctx, "payment-1", sealedFP, fn)
			if !errors.Is(err, middleware.ErrUnavailable) || !errors.Is(err, store.ErrUnsealable) || idemkit.CodeOf(err) != idemkit.CodeInternal {
				t.Fatalf("a node without the record's key: %v; want ErrUnavailable wrapping store.ErrUnsealable", err)
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("fn ran %d times; want 1", n)
			}
		})
	}
}

// TestSealedConformance runs the store suite on a sealed store on the
// shared single node: sealing keeps the contract and adds no round trip.
// The response limit is the store's, less the envelope.
func TestSealedConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		addr := testenv.Redis(t).Addr
		e := conformanceEnv(t, nodeClient(t, addr), nodeClient(t, addr))
		s, err := store.Seal(e.Store, sealedKeyQ4, sealedKeyQ3)
		if err != nil {
			t.Fatal(err)
		}
		e.Store = s
		e.MaxResponseBytes -= 34 + len(sealedKeyQ4.ID)
		return e
	})
}

// sealedGuard returns a guard on Seal(s, current).
func sealedGuard(t testing.TB, s store.Store, current store.SealKey, opts ...middleware.Option) *middleware.Guard {
	t.Helper()
	ss, err := store.Seal(s, current)
	if err != nil {
		t.Fatal(err)
	}
	g, err := middleware.New(ss, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
