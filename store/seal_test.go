package store_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/internal/fakeclock"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
	"github.com/idemkit/idemkit/store/storetest"
)

// The keys of these tests. Their secrets are printable so that a test can
// look for them in error messages.
var (
	sealQ3 = store.SealKey{ID: "2025-q3", Secret: []byte("q3-secret-32-bytes-long-aes-256!")}
	sealQ4 = store.SealKey{ID: "2025-q4", Secret: []byte("q4-secret-16byte")}
)

const (
	sealFP     = "test-v1:abababababababababababababababababababababababababababababababab"
	sealOtherF = "test-v1:cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
	sealMarker = `{"card":"4242424242424242","email":"ada@example.com"}`
	sealKey    = "orders:secret-record-key-42"
)

// sealEnvelopeOverhead is the documented size of the envelope around a
// response, besides the key id.
const sealEnvelopeOverhead = 51

// mustSeal returns Seal(s, current, older...), failing the test on an error.
func mustSeal(t testing.TB, s store.Store, current store.SealKey, older ...store.SealKey) store.Store {
	t.Helper()
	ss, err := store.Seal(s, current, older...)
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	return ss
}

// write claims key on s and completes it with response, failing the test
// unless both succeed.
func write(t testing.TB, s store.Store, key, fp string, response []byte) store.Record {
	t.Helper()
	ctx := context.Background()
	c, claimed, err := s.Claim(ctx, key, fp, time.Minute)
	if err != nil || !claimed {
		t.Fatalf("Claim: %+v, %v, %v", c, claimed, err)
	}
	c.State, c.Response = store.StateCompleted, response
	if ok, err := s.Complete(ctx, c, time.Hour); err != nil || !ok {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	return c
}

// raw returns the response the backend holds under key, as it is stored.
func raw(t testing.TB, s store.Store, key string) []byte {
	t.Helper()
	rec, ok, err := s.Get(context.Background(), key)
	if err != nil || !ok {
		t.Fatalf("Get of the raw record: %v, %v", ok, err)
	}
	return rec.Response
}

// wantUnsealable fails unless err is the Internal error of a response Seal
// cannot open, whose message contains want and neither the record key nor
// any key material.
func wantUnsealable(t *testing.T, what string, err error, want string) {
	t.Helper()
	var e *idemkit.Error
	if !errors.As(err, &e) || e.Code != idemkit.CodeInternal || !errors.Is(err, idemkit.ErrInternal) || !errors.Is(err, store.ErrUnsealable) {
		t.Fatalf("%s: error %v; want an Internal *idemkit.Error matching store.ErrUnsealable", what, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, want) {
		t.Fatalf("%s: message %q does not say %q", what, msg, want)
	}
	for _, secret := range []string{sealKey, string(sealQ3.Secret), string(sealQ4.Secret), hex.EncodeToString(sealQ3.Secret), hex.EncodeToString(sealQ4.Secret), sealMarker} {
		if strings.Contains(msg, secret) {
			t.Fatalf("%s: message %q repeats the record key, a secret or the response", what, msg)
		}
	}
}

// wantRefused fails unless both Get and Claim of key on s fail with the
// error wantUnsealable expects.
func wantRefused(t *testing.T, s store.Store, key, fp, want string) {
	t.Helper()
	rec, ok, err := s.Get(context.Background(), key)
	if ok || rec.Response != nil {
		t.Fatalf("Get returned %+v, %v with its error", rec, ok)
	}
	wantUnsealable(t, "Get", err, want)
	rec, claimed, err := s.Claim(context.Background(), key, fp, time.Minute)
	if claimed || rec.Response != nil {
		t.Fatalf("Claim returned %+v, %v with its error", rec, claimed)
	}
	wantUnsealable(t, "Claim", err, want)
}

func TestSealRoundTrip(t *testing.T) {
	ctx := context.Background()
	inner := memstore.New()
	s := mustSeal(t, inner, sealQ4)
	c := write(t, s, sealKey, sealFP, []byte(sealMarker))

	for name, read := range map[string]func() (store.Record, error){
		"Get": func() (store.Record, error) {
			rec, ok, err := s.Get(ctx, sealKey)
			if err == nil && !ok {
				t.Fatal("Get found nothing")
			}
			return rec, err
		},
		"Claim": func() (store.Record, error) {
			rec, claimed, err := s.Claim(ctx, sealKey, sealFP, time.Minute)
			if claimed {
				t.Fatal("Claim of a completed key made a new claim")
			}
			return rec, err
		},
	} {
		rec, err := read()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rec.State != store.StateCompleted || string(rec.Response) != sealMarker || rec.Fingerprint != sealFP || rec.Fence != c.Fence {
			t.Fatalf("%s: %+v; want the completed record with its response", name, rec)
		}
	}

	env := raw(t, inner, sealKey)
	if bytes.Contains(env, []byte("4242424242424242")) || bytes.Contains(env, []byte("ada@example.com")) {
		t.Fatalf("the backend holds the response in plain text: %q", env)
	}
	if !bytes.HasPrefix(env, []byte("\x89IKS\x01\x07"+sealQ4.ID)) {
		t.Fatalf("the envelope starts with %q; want the magic, version 1 and the key id", env[:min(len(env), 16)])
	}
	if got, want := len(env)-len(sealMarker), sealEnvelopeOverhead+len(sealQ4.ID); got != want {
		t.Fatalf("the envelope adds %d bytes; want %d (51 + the key id)", got, want)
	}

	// Two seals of the same response differ (a fresh nonce each time).
	write(t, s, sealKey+"-2", sealFP, []byte(sealMarker))
	if bytes.Equal(raw(t, inner, sealKey+"-2"), env) {
		t.Fatal("two seals of one response are equal: the nonce is not fresh")
	}

	// Empty responses and not-replayable outcomes are sealed too: the
	// envelope authenticates their state and fence.
	write(t, s, "empty", sealFP, nil)
	if r := raw(t, inner, "empty"); len(r) != sealEnvelopeOverhead+len(sealQ4.ID) {
		t.Fatalf("an empty response is stored as %d bytes; want an envelope", len(r))
	}
	if rec, _, err := s.Get(ctx, "empty"); err != nil || rec.Response == nil || len(rec.Response) != 0 || rec.State != store.StateCompleted {
		t.Fatalf("Get of an empty response: %+v, %v", rec, err)
	}
	nr, _, _ := s.Claim(ctx, "not-replayable", sealFP, time.Minute)
	nr.State = store.StateNotReplayable
	if ok, err := s.Complete(ctx, nr, time.Hour); !ok || err != nil {
		t.Fatalf("Complete of a not-replayable outcome: %v, %v", ok, err)
	}
	if r := raw(t, inner, "not-replayable"); len(r) != sealEnvelopeOverhead+len(sealQ4.ID) {
		t.Fatalf("a not-replayable outcome is stored with %d bytes; want an envelope", len(r))
	}
	for name, read := range map[string]func() (store.Record, error){
		"Get": func() (store.Record, error) { r, _, err := s.Get(ctx, "not-replayable"); return r, err },
		"Claim": func() (store.Record, error) {
			r, _, err := s.Claim(ctx, "not-replayable", sealFP, time.Minute)
			return r, err
		},
	} {
		if rec, err := read(); err != nil || rec.State != store.StateNotReplayable || rec.Response != nil {
			t.Fatalf("%s of a not-replayable outcome: %+v, %v", name, rec, err)
		}
	}

	// Extend, Release and Delete pass through.
	h, _, _ := s.Claim(ctx, "held", sealFP, time.Minute)
	if _, ok, err := s.Extend(ctx, "held", h.Fence, time.Minute); !ok || err != nil {
		t.Fatalf("Extend: %v, %v", ok, err)
	}
	if ok, err := s.Release(ctx, "held", h.Fence); !ok || err != nil {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	if ok, err := s.Delete(ctx, sealKey); !ok || err != nil {
		t.Fatalf("Delete: %v, %v", ok, err)
	}
}

// TestSealCompleteLeavesTheCallersSlice: the caller's response is read,
// never changed.
func TestSealCompleteLeavesTheCallersSlice(t *testing.T) {
	s := mustSeal(t, memstore.New(), sealQ4)
	body := []byte(sealMarker)
	write(t, s, sealKey, sealFP, body)
	if string(body) != sealMarker {
		t.Fatalf("Complete changed the caller's response: %q", body)
	}
}

func TestSealRotation(t *testing.T) {
	inner := memstore.New()
	before := mustSeal(t, inner, sealQ3)
	write(t, before, "old", sealFP, []byte("sealed under q3"))

	// The new key comes in as current, the old one stays as older.
	rotated := mustSeal(t, inner, sealQ4, sealQ3)
	rec, ok, err := rotated.Get(context.Background(), "old")
	if err != nil || !ok || string(rec.Response) != "sealed under q3" {
		t.Fatalf("a record sealed under the older key: %+v, %v, %v", rec, ok, err)
	}
	write(t, rotated, "new", sealFP, []byte("sealed under q4"))
	if env := raw(t, inner, "new"); !bytes.HasPrefix(env, []byte("\x89IKS\x01\x07"+sealQ4.ID)) {
		t.Fatalf("a new record is sealed under %q; want the current key", env[:min(len(env), 16)])
	}
	if rec, _, err := rotated.Claim(context.Background(), "new", sealFP, time.Minute); err != nil || string(rec.Response) != "sealed under q4" {
		t.Fatalf("a record sealed under the current key: %+v, %v", rec, err)
	}

	// A node that does not know the new key yet cannot open its records:
	// give a new key as older everywhere before making it current.
	wantRefused(t, before, "new", sealFP, `key id "2025-q4", which is not among the keys given`)
}

func TestSealRetiredKey(t *testing.T) {
	inner := memstore.New()
	write(t, mustSeal(t, inner, sealQ3), sealKey, sealFP, []byte(sealMarker))
	retired := mustSeal(t, inner, sealQ4)
	wantRefused(t, retired, sealKey, sealFP,
		`record sealed with key id "2025-q3", which is not among the keys given: add it back to the older keys until its records expire`)
	// The operator can still forget it.
	if ok, err := retired.Delete(context.Background(), sealKey); !ok || err != nil {
		t.Fatalf("Delete of a record sealed under a retired key: %v, %v", ok, err)
	}
}

// TestSealRefusesWhatItCannotTrust covers the responses that must never
// be returned: altered, moved to another key or request, sealed under
// another secret with the same id, truncated, of an unknown version, or
// not sealed at all.
func TestSealRefusesWhatItCannotTrust(t *testing.T) {
	inner := memstore.New()
	s := mustSeal(t, inner, sealQ4, sealQ3)
	write(t, s, sealKey, sealFP, []byte(sealMarker))
	env := raw(t, inner, sealKey)
	header := len("\x89IKS\x01\x07" + sealQ4.ID) // then state, fence and TTL, then the nonce

	flip := func(i int) []byte {
		b := bytes.Clone(env)
		b[i] ^= 0x01
		return b
	}
	const authFailed = `record sealed with key id "2025-q4" failed authentication`
	// Each case stores its bytes as the response of a record of its own
	// backend, under sealKey and sealFP unless it says otherwise.
	for _, c := range []struct {
		name string
		key  string
		fp   string
		body []byte
		want string
	}{
		{"altered ciphertext", sealKey, sealFP, flip(len(env) - 20), authFailed},
		{"altered tag", sealKey, sealFP, flip(len(env) - 1), authFailed},
		{"altered state", sealKey, sealFP, flip(header), authFailed},
		{"altered fence", sealKey, sealFP, flip(header + 8), authFailed},
		{"altered TTL", sealKey, sealFP, flip(header + 16), authFailed},
		{"altered nonce", sealKey, sealFP, flip(header + 17), authFailed},
		{"moved to another key", sealKey + "-other", sealFP, env, authFailed},
		{"moved to another request", sealKey, sealOtherF, env, authFailed},
		{"id changed to another known key", sealKey, sealFP, bytes.Replace(env, []byte(sealQ4.ID), []byte(sealQ3.ID), 1), `record sealed with key id "2025-q3" failed authentication`},
		{"id changed to an unknown key", sealKey, sealFP, bytes.Replace(env, []byte(sealQ4.ID), []byte("2025-q9"), 1), `key id "2025-q9", which is not among the keys given`},
		{"truncated", sealKey, sealFP, env[:header+17+27], "truncated"},
		{"magic only", sealKey, sealFP, []byte("\x89IKS\x01"), "truncated"},
		{"unknown version", sealKey, sealFP, append([]byte("\x89IKS\x02"), env[5:]...), "envelope version 2"},
		{"malformed id", sealKey, sealFP, append(append([]byte("\x89IKS\x01\x02\x00\x01\x02"), make([]byte, 16+28)...), 'x'), "malformed"},
		{"malformed state", sealKey, sealFP, append(append([]byte("\x89IKS\x01\x01k\x01"), make([]byte, 16+28)...), 'x'), "malformed"},
		{"empty", sealKey, sealFP, nil, "not sealed"},
		{"plain text", sealKey, sealFP, []byte(sealMarker), "not sealed"},
		{"one byte", sealKey, sealFP, []byte{0x89}, "not sealed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			backend := memstore.New()
			write(t, backend, c.key, c.fp, c.body)
			wantRefused(t, mustSeal(t, backend, sealQ4, sealQ3), c.key, c.fp, c.want)
		})
	}
}

// TestSealAnotherSecretUnderTheSameID: a record sealed by a node whose
// key has the same id but another secret (a configuration mistake) fails
// authentication rather than opening to garbage.
func TestSealAnotherSecretUnderTheSameID(t *testing.T) {
	inner := memstore.New()
	write(t, mustSeal(t, inner, store.SealKey{ID: sealQ4.ID, Secret: bytes.Repeat([]byte{7}, 16)}), sealKey, sealFP, []byte(sealMarker))
	wantRefused(t, mustSeal(t, inner, sealQ4), sealKey, sealFP, `record sealed with key id "2025-q4" failed authentication`)
}

func TestSealInvalidKeys(t *testing.T) {
	secret := []byte("0123456789abcdef")
	for _, c := range []struct {
		name    string
		s       store.Store
		current store.SealKey
		older   []store.SealKey
		want    string
	}{
		{"nil store", nil, sealQ4, nil, "store must not be nil"},
		{"empty id", memstore.New(), store.SealKey{Secret: secret}, nil, "the current key: key id must be"},
		{"id with a space", memstore.New(), store.SealKey{ID: "2025 q4", Secret: secret}, nil, "key id must be"},
		{"id with a control character", memstore.New(), store.SealKey{ID: "2025\nq4", Secret: secret}, nil, "key id must be"},
		{"id beyond ASCII", memstore.New(), store.SealKey{ID: "clé", Secret: secret}, nil, "key id must be"},
		{"id of 65 bytes", memstore.New(), store.SealKey{ID: strings.Repeat("k", 65), Secret: secret}, nil, "1 to 64"},
		{"no secret", memstore.New(), store.SealKey{ID: "k"}, nil, "0 bytes; want 16, 24 or 32"},
		{"short secret", memstore.New(), store.SealKey{ID: "k", Secret: secret[:15]}, nil, "15 bytes; want 16, 24 or 32"},
		{"long secret", memstore.New(), store.SealKey{ID: "k", Secret: append(bytes.Clone(secret), secret...)[:31]}, nil, "31 bytes"},
		{"zero secret", memstore.New(), store.SealKey{ID: "k", Secret: make([]byte, 32)}, nil, "all zero"},
		{"bad older key", memstore.New(), sealQ4, []store.SealKey{sealQ3, {ID: "k", Secret: secret[:3]}}, "older key 2: "},
		{"current id given again", memstore.New(), sealQ4, []store.SealKey{{ID: sealQ4.ID, Secret: secret}}, `older key 1: key id "2025-q4" is given twice`},
		{"older id given twice", memstore.New(), sealQ4, []store.SealKey{sealQ3, sealQ3}, `older key 2: key id "2025-q3" is given twice`},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := store.Seal(c.s, c.current, c.older...)
			if s != nil || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !errors.Is(err, idemkit.ErrInvalidArgument) {
				t.Fatalf("Seal = %v, %v; want an InvalidArgument error", s, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, c.want) {
				t.Fatalf("message %q does not say %q", msg, c.want)
			}
			for _, k := range append([]store.SealKey{c.current}, c.older...) {
				if len(k.Secret) >= 3 && (strings.Contains(msg, string(k.Secret)) || strings.Contains(msg, hex.EncodeToString(k.Secret))) {
					t.Fatalf("message %q repeats a secret", msg)
				}
			}
		})
	}
	// Every AES size is accepted, and Seal keeps no reference to the
	// secret: changing it afterwards changes nothing.
	for _, n := range []int{16, 24, 32} {
		b := bytes.Repeat([]byte{0x5a}, n)
		inner := memstore.New()
		s := mustSeal(t, inner, store.SealKey{ID: "k", Secret: b})
		write(t, s, "x", sealFP, []byte("ok"))
		clear(b)
		if rec, _, err := s.Get(context.Background(), "x"); err != nil || string(rec.Response) != "ok" {
			t.Fatalf("AES-%d: %+v, %v", 8*n, rec, err)
		}
	}
}

// TestSealConformance runs the store suite on a sealed memory store. Its
// response limit is the memory store's, less the envelope.
func TestSealConformance(t *testing.T) {
	const limit = 1 << 20
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		clock := fakeclock.New()
		inner := memstore.New(memstore.WithClock(clock.Now), memstore.WithMaxResponseBytes(limit))
		t.Cleanup(func() { _ = inner.Close() })
		// The sealed store times claims on the same injected clock: on the
		// process clock, a machine slow between a claim and its completion
		// lengthens the sealed lifetime past the store's injected expiry.
		sealed := mustSeal(t, inner, sealQ4, sealQ3)
		store.SetSealClock(sealed, clock.Now)
		return &storetest.Env{
			Store:            sealed,
			Advance:          clock.Advance,
			Break:            func() { _ = inner.Close() },
			MaxResponseBytes: limit - sealEnvelopeOverhead - len(sealQ4.ID),
		}
	})
}

// TestSealConformanceRealClock runs the suite on the process clock, with
// the current key's id as long as ids go.
func TestSealConformanceRealClock(t *testing.T) {
	const limit = 1 << 20
	id := strings.Repeat("k", 64)
	storetest.Run(t, func(t *testing.T) *storetest.Env {
		inner := memstore.New(memstore.WithMaxResponseBytes(limit))
		t.Cleanup(func() { _ = inner.Close() })
		return &storetest.Env{
			Store:            mustSeal(t, inner, store.SealKey{ID: id, Secret: sealQ3.Secret}),
			Break:            func() { _ = inner.Close() },
			Margin:           30 * time.Millisecond,
			MaxResponseBytes: limit - sealEnvelopeOverhead - len(id),
		}
	})
}

// TestSealThroughGuard: a guard on a sealed store replays what it sealed,
// and for a record it cannot open (a retired key, a response written
// before sealing was turned on) it answers unavailable, with the store's
// error inside, and never runs fn again.
func TestSealThroughGuard(t *testing.T) {
	ctx := context.Background()
	fp := fingerprint.New("test", [32]byte{1})
	var runs atomic.Int32
	fn := func(context.Context) (middleware.Result, error) {
		runs.Add(1)
		return middleware.Result{Value: []byte(sealMarker)}, nil
	}
	guard := func(s store.Store, opts ...middleware.Option) *middleware.Guard {
		g, err := middleware.New(s, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	inner := memstore.New()

	g := guard(mustSeal(t, inner, sealQ3))
	out, err := g.Execute(ctx, "order-1", fp, fn)
	if err != nil || out.Replayed || !out.Recorded {
		t.Fatalf("first execution: %+v, %v", out, err)
	}
	out, err = g.Execute(ctx, "order-1", fp, fn)
	if err != nil || !out.Replayed || string(out.Value) != sealMarker || runs.Load() != 1 {
		t.Fatalf("retry: %+v, %v (fn ran %d times)", out, err, runs.Load())
	}
	if r := raw(t, inner, "idempotency::order-1"); bytes.Contains(r, []byte("4242424242424242")) {
		t.Fatal("the backend holds the response in plain text")
	}

	// A record written before sealing was turned on.
	plain := guard(inner)
	if _, err := plain.Execute(ctx, "order-2", fp, fn); err != nil {
		t.Fatal(err)
	}

	var events []middleware.Event
	retired := guard(mustSeal(t, inner, sealQ4), middleware.WithWaitBudget(0),
		middleware.WithHook(middleware.HookFunc(func(_ context.Context, e middleware.Event) { events = append(events, e) })))
	for _, c := range []struct{ key, want string }{
		{"order-1", `key id "2025-q3", which is not among the keys given`},
		{"order-2", "not sealed"},
	} {
		for range 3 {
			out, err := retired.Execute(ctx, c.key, fp, fn)
			if !errors.Is(err, middleware.ErrUnavailable) || !errors.Is(err, store.ErrUnsealable) || idemkit.CodeOf(err) != idemkit.CodeInternal {
				t.Fatalf("%s: %+v, %v; want ErrUnavailable wrapping store.ErrUnsealable", c.key, out, err)
			}
			if !strings.Contains(err.Error(), c.want) || out.Value != nil {
				t.Fatalf("%s: %+v, %v; want no value and an error that says %q", c.key, out, err, c.want)
			}
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("fn ran %d times; want 2 (once per key, never for a record that does not open)", n)
	}
	if len(events) != 6 || events[0].Kind != middleware.EventUnavailable || !errors.Is(events[0].Err, store.ErrUnsealable) {
		t.Fatalf("events %+v; want one unavailable outcome per call, matching store.ErrUnsealable", events)
	}

	// Once the key is given back, the record replays.
	back := guard(mustSeal(t, inner, sealQ4, sealQ3))
	if out, err := back.Execute(ctx, "order-1", fp, fn); err != nil || !out.Replayed || string(out.Value) != sealMarker {
		t.Fatalf("with the older key given back: %+v, %v", out, err)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("fn ran %d times; want 2", n)
	}
}

// The fuzz target's fixed keys and records.
var (
	fuzzKey    = store.SealKey{ID: "fuzz-1", Secret: []byte("fuzz-secret-0123456789abcdefghij")}
	fuzzRecord = "fuzz:record"
)

// fixedNow is the clock of fixedStore.
var fixedNow = time.UnixMilli(1_767_225_600_000)

// fixedFence is the fence of the first claim on a fixedStore.
const fixedFence = 1_767_225_600_000

// fixedStore returns a memory store whose clock stands still at fixedNow,
// so that the first claim of a key has the fence fixedFence.
func fixedStore() *memstore.Store {
	return memstore.New(memstore.WithClock(func() time.Time { return fixedNow }))
}

// envelope builds, independently of Seal, the envelope of plain under k
// for the record key and fingerprint fp, a completed outcome under fence
// kept for an hour, with the given nonce: the format Seal documents.
func envelope(t testing.TB, k store.SealKey, key, fp string, fence uint64, nonce [12]byte, plain []byte) []byte {
	t.Helper()
	block, err := aes.NewCipher(k.Secret)
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	header := append([]byte("\x89IKS\x01"), byte(len(k.ID)))
	header = append(header, k.ID...)
	header = append(header, byte(store.StateCompleted))
	header = binary.BigEndian.AppendUint64(header, fence)
	header = binary.BigEndian.AppendUint64(header, uint64(time.Hour.Milliseconds()))
	aad := bytes.Clone(header)
	aad = binary.BigEndian.AppendUint32(aad, uint32(len(key)))
	aad = append(aad, key...)
	aad = binary.BigEndian.AppendUint32(aad, uint32(len(fp)))
	aad = append(aad, fp...)
	env := append(bytes.Clone(header), nonce[:]...)
	return gcm.Seal(env, nonce[:], plain, aad)
}

// TestSealEnvelopeFormat: an envelope built from the documented format
// opens, so the format is pinned.
func TestSealEnvelopeFormat(t *testing.T) {
	inner := fixedStore()
	env := envelope(t, sealQ3, sealKey, sealFP, fixedFence, [12]byte{1, 2, 3}, []byte(sealMarker))
	if c := write(t, inner, sealKey, sealFP, env); c.Fence != fixedFence {
		t.Fatalf("the claim's fence is %d; want %d", c.Fence, fixedFence)
	}
	rec, _, err := mustSeal(t, inner, sealQ4, sealQ3).Get(context.Background(), sealKey)
	if err != nil || string(rec.Response) != sealMarker {
		t.Fatalf("a documented envelope: %+v, %v", rec, err)
	}
}

// FuzzOpen stores arbitrary bytes as a completed record's response and
// reads them through Seal: it never panics, and it returns a response only
// for the envelopes sealed for that record (its key, fingerprint, state
// and fence) under one of its keys; everything else, empty bytes
// included, is an error matching ErrUnsealable.
func FuzzOpen(f *testing.F) {
	genuine := map[string]string{} // envelope → the response it seals
	for i, plain := range []string{"", "x", sealMarker, strings.Repeat("z", 300)} {
		env := envelope(f, fuzzKey, fuzzRecord, sealFP, fixedFence, [12]byte{byte(i), 9}, []byte(plain))
		genuine[string(env)] = plain
		f.Add(env)
	}
	older := envelope(f, sealQ3, fuzzRecord, sealFP, fixedFence, [12]byte{}, []byte("sealed under an older key"))
	genuine[string(older)] = "sealed under an older key"
	f.Add(older)
	f.Add([]byte{})
	f.Add([]byte(sealMarker))
	f.Add([]byte("\x89IKS\x01"))
	f.Add([]byte("\x89IKS\x01\xff"))
	f.Add(envelope(f, sealQ4, fuzzRecord, sealFP, fixedFence, [12]byte{}, []byte("a key not given")))
	f.Add(envelope(f, fuzzKey, "another record", sealFP, fixedFence, [12]byte{}, []byte("another record")))
	f.Add(envelope(f, fuzzKey, fuzzRecord, sealOtherF, fixedFence, [12]byte{}, []byte("another request")))
	f.Add(envelope(f, fuzzKey, fuzzRecord, sealFP, fixedFence+1, [12]byte{}, []byte("another fence")))
	f.Fuzz(func(t *testing.T, b []byte) {
		inner := fixedStore()
		s, err := store.Seal(inner, fuzzKey, sealQ3)
		if err != nil {
			t.Fatal(err)
		}
		write(t, inner, fuzzRecord, sealFP, b)
		rec, ok, err := s.Get(context.Background(), fuzzRecord)
		want, sealedHere := genuine[string(b)]
		if sealedHere {
			if err != nil || !ok || rec.Response == nil || string(rec.Response) != want {
				t.Fatalf("a genuine envelope: %q, %v; want %q", rec.Response, err, want)
			}
		} else {
			if err == nil || ok || rec.Response != nil {
				t.Fatalf("bytes %q it did not seal opened to %q, %v, %v", b, rec.Response, ok, err)
			}
			if !errors.Is(err, store.ErrUnsealable) || idemkit.CodeOf(err) != idemkit.CodeInternal {
				t.Fatalf("bytes %q: error %v; want an Internal error matching ErrUnsealable", b, err)
			}
			if strings.Contains(err.Error(), fuzzRecord) {
				t.Fatalf("the error repeats the record key: %v", err)
			}
		}
		// Claim opens the same way.
		rec2, claimed, err2 := s.Claim(context.Background(), fuzzRecord, sealFP, time.Minute)
		if claimed || (err == nil) != (err2 == nil) || !bytes.Equal(rec.Response, rec2.Response) {
			t.Fatalf("Claim disagrees with Get: %+v, %v, %v; Get: %+v, %v", rec2, claimed, err2, rec, err)
		}
	})
}

// TestSealKeepsNotification: a sealed store over a store that notifies
// notifies too (and is still inspected as sealed); over one that does not,
// it does not claim to.
func TestSealKeepsNotification(t *testing.T) {
	current, _ := guardtest.SealKeys()
	inner := memstore.New()
	s, err := store.Seal(inner, current)
	if err != nil {
		t.Fatal(err)
	}
	w, ok := s.(store.Watcher)
	if !ok {
		t.Fatal("a sealed memstore is not a Watcher")
	}
	claim, _, err := s.Claim(t.Context(), "k", "fp", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ch, stop := w.Watch(t.Context(), "k")
	defer stop()
	claim.State, claim.Response = store.StateCompleted, []byte("secret")
	if ok, err := s.Complete(t.Context(), claim, time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("the completion did not fire the watch through the sealed store")
	}
	if in, ok, err := store.Inspect(t.Context(), s, "k", true); err != nil || !ok || !in.Sealed || string(in.Response) != "secret" {
		t.Fatalf("inspect: %+v, %v, %v", in, ok, err)
	}
	plain, err := store.Seal(struct{ store.Store }{inner}, current)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := plain.(store.Watcher); ok {
		t.Fatal("a sealed store over a store that cannot notify claims to")
	}
}

// expireBehindTheStoresBack rewrites the outcome under key in inner, as
// it is stored (envelope, state, fence), with a record TTL of 1 ms: the
// record looks expired once the clock moves, as if its expiry had been
// changed on the backend.
func expireBehindTheStoresBack(t *testing.T, inner *memstore.Store, key string) store.Record {
	t.Helper()
	rec, ok, err := inner.Get(context.Background(), key)
	if err != nil || !ok {
		t.Fatalf("Get of the raw record: %v, %v", ok, err)
	}
	if ok, err := inner.Put(context.Background(), rec, time.Millisecond); !ok || err != nil {
		t.Fatalf("Put: %v, %v", ok, err)
	}
	return rec
}

// TestSealRestoresAnOutcomeMadeToLookExpired: a claim that takes over an
// outcome whose sealed fence plus TTL is still ahead of the store's clock
// writes that outcome back under the new claim, for the rest of its
// lifetime, and returns it as a replay; once that lifetime is over, the
// key is free, and the claim reports the response it replaced, opened.
func TestSealRestoresAnOutcomeMadeToLookExpired(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New()
	inner := memstore.New(memstore.WithClock(clock.Now))
	s := mustSeal(t, inner, sealQ4)
	for _, state := range []store.State{store.StateCompleted, store.StateNotReplayable} {
		key := sealKey + "-" + state.String()
		c, _, err := s.Claim(ctx, key, sealFP, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		out := c
		out.State, out.Response = state, []byte(sealMarker)
		if ok, err := s.Complete(ctx, out, time.Hour); !ok || err != nil {
			t.Fatalf("Complete: %v, %v", ok, err)
		}
		expiresAt := c.CreatedAt.Add(time.Hour)

		expireBehindTheStoresBack(t, inner, key)
		clock.Advance(time.Second)
		rec, claimed, err := s.Claim(ctx, key, sealOtherF, time.Minute)
		if err != nil || claimed || rec.State != state || rec.Fingerprint != sealFP || string(rec.Response) != sealMarker || rec.Replaced != nil {
			t.Fatalf("%v: Claim over the tampered record: %+v, %v, %v; want the authentic outcome back", state, rec, claimed, err)
		}
		if rec.Fence <= c.Fence || !rec.ExpiresAt.Equal(expiresAt) {
			t.Fatalf("%v: restored under fence %v until %v; want a new fence above %v, until %v", state, rec.Fence, rec.ExpiresAt, c.Fence, expiresAt)
		}
		got, ok, err := s.Get(ctx, key)
		if err != nil || !ok || got.State != state || string(got.Response) != sealMarker || got.Fence != rec.Fence || !got.ExpiresAt.Equal(expiresAt) {
			t.Fatalf("%v: Get after the restoration: %+v, %v, %v", state, got, ok, err)
		}

		// Its lifetime over, the key is free again.
		clock.Advance(time.Hour)
		rec, claimed, err = s.Claim(ctx, key, sealFP, time.Minute)
		if err != nil || !claimed || rec.Replaced == nil || string(rec.Replaced.Response) != sealMarker || rec.Replaced.Fingerprint != sealFP {
			t.Fatalf("%v: Claim once the outcome expired: %+v, %v, %v; want a new claim reporting the opened response it replaced", state, rec, claimed, err)
		}
	}
}

// failingCompletes is a store whose Complete fails, with err.
type failingCompletes struct {
	store.Store
	err error
}

func (f failingCompletes) Complete(context.Context, store.Record, time.Duration) (bool, error) {
	return false, f.err
}

// TestSealRestorationFailureRefuses: when the outcome made to look expired
// cannot be written back, the claim is released and Claim fails with an
// Internal error matching ErrUnsealable; the key is not handed out.
func TestSealRestorationFailureRefuses(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New()
	inner := memstore.New(memstore.WithClock(clock.Now))
	write(t, mustSeal(t, inner, sealQ4), sealKey, sealFP, []byte(sealMarker))
	expireBehindTheStoresBack(t, inner, sealKey)
	clock.Advance(time.Second)

	cause := idemkit.NewError(idemkit.CodeServiceUnavailable, "complete", "the backend went away", nil)
	s := mustSeal(t, failingCompletes{Store: inner, err: cause}, sealQ4)
	rec, claimed, err := s.Claim(ctx, sealKey, sealFP, time.Minute)
	if claimed || rec.State != 0 {
		t.Fatalf("Claim returned %+v, %v with its error", rec, claimed)
	}
	wantUnsealable(t, "Claim", err, "made to look expired on the backend")
	if !strings.Contains(err.Error(), "the backend went away") {
		t.Fatalf("the error %q does not say why the restoration failed", err)
	}
	// The claim was released: the key holds nothing live.
	if got, ok, err := inner.Get(ctx, sealKey); ok || err != nil {
		t.Fatalf("after the failed restoration the key holds %+v, %v", got, err)
	}
}

// TestSealRefusesChangedStateOrFence: an outcome whose state or fence on
// the backend differs from its envelope's is refused by Get and Claim.
func TestSealRefusesChangedStateOrFence(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		sealed store.State
		change func(*store.Record)
	}{
		{"not replayable flipped to completed", store.StateNotReplayable, func(r *store.Record) { r.State = store.StateCompleted }},
		{"completed turned not replayable", store.StateCompleted, func(r *store.Record) { r.State = store.StateNotReplayable }},
		{"fence raised", store.StateCompleted, func(r *store.Record) { r.Fence++ }},
		{"fence lowered", store.StateCompleted, func(r *store.Record) { r.Fence-- }},
	} {
		t.Run(c.name, func(t *testing.T) {
			inner := memstore.New()
			s := mustSeal(t, inner, sealQ4)
			claim, _, err := s.Claim(ctx, sealKey, sealFP, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			claim.State, claim.Response = c.sealed, []byte(sealMarker)
			if ok, err := s.Complete(ctx, claim, time.Hour); !ok || err != nil {
				t.Fatalf("Complete: %v, %v", ok, err)
			}
			rec, _, _ := inner.Get(ctx, sealKey)
			c.change(&rec)
			if _, err := inner.Delete(ctx, sealKey); err != nil {
				t.Fatal(err)
			}
			if ok, err := inner.Put(ctx, rec, time.Hour); !ok || err != nil {
				t.Fatalf("Put: %v, %v", ok, err)
			}
			wantRefused(t, s, sealKey, sealFP, "the record's state or fence was changed on the backend")
		})
	}
}

// TestSealTimesTheWork: the sealed lifetime counts the time from the claim
// to its completion, so an outcome made to look free after its fence plus
// its record TTL, but before its real expiry (its completion plus its
// TTL), is still restored.
func TestSealTimesTheWork(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New()
	inner := memstore.New(memstore.WithClock(clock.Now))
	s := mustSeal(t, inner, sealQ4)
	store.SetSealClock(s, clock.Now)

	c, claimed, err := s.Claim(ctx, sealKey, sealFP, time.Minute)
	if err != nil || !claimed {
		t.Fatal(claimed, err)
	}
	clock.Advance(30 * time.Second) // the work
	out := c
	out.State, out.Response = store.StateCompleted, []byte(sealMarker)
	if ok, err := s.Complete(ctx, out, time.Hour); !ok || err != nil {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	expiresAt := c.CreatedAt.Add(30*time.Second + time.Hour)

	// Past the claim's time plus the TTL, 10 s before the real expiry.
	clock.Advance(time.Hour - 10*time.Second)
	expireBehindTheStoresBack(t, inner, sealKey)
	clock.Advance(time.Millisecond)
	rec, claimed, err := s.Claim(ctx, sealKey, sealFP, time.Minute)
	if err != nil || claimed || string(rec.Response) != sealMarker || !rec.ExpiresAt.Equal(expiresAt) {
		t.Fatalf("Claim over the tampered record: %+v, %v, %v; want the authentic outcome until %v", rec, claimed, err, expiresAt)
	}
}

// TestSealSteps: a sealed store over a store.Stepper records steps; the
// backend holds each result sealed (never the plain text), a claim that
// carries them and Get open them, and a step result altered on the
// backend is refused (ErrUnsealable) rather than returned.
func TestSealSteps(t *testing.T) {
	ctx := context.Background()
	inner := memstore.New()
	defer inner.Close()
	s := mustSeal(t, inner, sealQ4)
	st, ok := s.(store.Stepper)
	if !ok {
		t.Fatalf("%T over memstore is no store.Stepper", s)
	}
	if _, ok := mustSeal(t, store.Store(struct{ store.Store }{inner}), sealQ4).(store.Stepper); ok {
		t.Fatal("a sealed store over a store that records no steps claims to")
	}
	c, _, err := s.Claim(ctx, sealKey, sealFP, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := st.RecordStep(ctx, sealKey, c.Fence, 0, store.Step{Name: "charge", Result: []byte(sealMarker)}, time.Hour); err != nil || !ok {
		t.Fatalf("RecordStep: %v, %v", ok, err)
	}
	raw, _, _ := inner.Get(ctx, sealKey)
	if len(raw.Steps) != 1 || bytes.Contains(raw.Steps[0].Result, []byte(sealMarker)) {
		t.Fatalf("the backend holds the step %q; want it sealed", raw.Steps)
	}
	got, _, err := s.Get(ctx, sealKey)
	if err != nil || len(got.Steps) != 1 || string(got.Steps[0].Result) != sealMarker {
		t.Fatalf("Get: %+v, %v", got.Steps, err)
	}
	if ok, err := s.Release(ctx, sealKey, c.Fence); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	n, claimed, err := s.Claim(ctx, sealKey, sealFP, time.Minute)
	if err != nil || !claimed || len(n.Steps) != 1 || n.Steps[0].Name != "charge" || string(n.Steps[0].Result) != sealMarker {
		t.Fatalf("the claim after a release: %+v, %v, %v", n.Steps, claimed, err)
	}
	if ok, err := st.RecordStep(ctx, sealKey, n.Fence, 1, store.Step{Name: "email", Result: []byte("x")}, time.Hour); err != nil || !ok {
		t.Fatalf("RecordStep 1: %v, %v", ok, err)
	}
	raw, _, _ = inner.Get(ctx, sealKey)
	// The two steps' results swapped on a backend: each is bound to its
	// index and name.
	swapped := memstore.New()
	defer swapped.Close()
	c2, _, _ := swapped.Claim(ctx, sealKey, sealFP, time.Minute)
	for i, r := range []store.Step{{Name: "charge", Result: raw.Steps[1].Result}, {Name: "email", Result: raw.Steps[0].Result}} {
		if ok, err := swapped.RecordStep(ctx, sealKey, c2.Fence, i, r, time.Hour); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	if _, _, err := mustSeal(t, swapped, sealQ4).Get(ctx, sealKey); !errors.Is(err, store.ErrUnsealable) {
		t.Fatalf("Get of swapped step results: %v; want ErrUnsealable", err)
	}
}
