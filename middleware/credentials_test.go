package middleware_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

// wantCredentialsMismatch fails unless err is the guard's credentials
// mismatch, and nothing else.
func wantCredentialsMismatch(t *testing.T, what string, out middleware.Outcome, err error) {
	t.Helper()
	if !errors.Is(err, middleware.ErrCredentialsMismatch) || errors.Is(err, middleware.ErrMismatch) || out.Replayed || out.Value != nil {
		t.Fatalf("%s: %+v, %v; want ErrCredentialsMismatch alone, and no response", what, out, err)
	}
}

func TestCredentialsBinding(t *testing.T) {
	ev := &events{}
	g := newGuard(t, memstore.New(), middleware.WithHook(ev))
	var runs atomic.Int32
	alice := middleware.Credentials("Bearer alice-token", "")
	bob := middleware.Credentials("Bearer bob-token", "")
	if out, err := g.Execute(t.Context(), "pay-1", fpA, value(&runs, "alice's receipt"), alice); err != nil || out.Replayed {
		t.Fatalf("first: %+v, %v", out, err)
	}
	// The same credentials replay.
	if out, err := g.Execute(t.Context(), "pay-1", fpA, value(&runs, "x"), alice); err != nil || !out.Replayed || string(out.Value) != "alice's receipt" {
		t.Fatalf("the same credentials: %+v, %v; want a replay", out, err)
	}
	// Other credentials, with the same payload or another one, are refused
	// as such, before the payloads are compared.
	out, err := g.Execute(t.Context(), "pay-1", fpA, value(&runs, "x"), bob)
	wantCredentialsMismatch(t, "other credentials", out, err)
	out, err = g.Execute(t.Context(), "pay-1", fpB, value(&runs, "x"), bob)
	wantCredentialsMismatch(t, "other credentials and payload", out, err)
	// A call without credentials on a bound record, and a bound call on a
	// record written without them, differ too.
	out, err = g.Execute(t.Context(), "pay-1", fpA, value(&runs, "x"))
	wantCredentialsMismatch(t, "no binding on a bound record", out, err)
	if _, err := g.Execute(t.Context(), "anon", fpA, value(&runs, "anonymous")); err != nil {
		t.Fatal(err)
	}
	out, err = g.Execute(t.Context(), "anon", fpA, value(&runs, "x"), alice)
	wantCredentialsMismatch(t, "a binding on an unbound record", out, err)
	// Bound with the same credentials, the payload still counts.
	if _, err := g.Execute(t.Context(), "pay-1", fpB, value(&runs, "x"), alice); !errors.Is(err, middleware.ErrMismatch) {
		t.Fatalf("the same credentials, another payload: %v; want ErrMismatch", err)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("fn ran %d times; want 2 (one per key)", n)
	}
	if n := ev.count(middleware.EventCredentialsMismatch); n != 4 {
		t.Fatalf("%d credentials-mismatch events (%v); want 4", n, ev.kinds())
	}
	for _, e := range ev.list {
		if e.Kind == middleware.EventCredentialsMismatch && (!errors.Is(e.Err, middleware.ErrCredentialsMismatch) || e.KeyHash == "") {
			t.Fatalf("event %+v; want ErrCredentialsMismatch and a key hash", e)
		}
	}
	if middleware.EventCredentialsMismatch.String() != "credentials-mismatch" {
		t.Fatalf("name %q", middleware.EventCredentialsMismatch)
	}
}

func TestCredentialsAreAnOrderedList(t *testing.T) {
	g := newGuard(t, memstore.New())
	var runs atomic.Int32
	lists := [][]string{nil, {""}, {"", ""}, {"a", "b"}, {"b", "a"}, {"ab"}, {"a", "b", ""}, {"a\x00\x00\x00\x01b"}}
	for i, l := range lists {
		out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v"), middleware.Credentials(l...))
		switch {
		case i == 0 && err != nil:
			t.Fatal(err)
		case i > 0:
			wantCredentialsMismatch(t, strings.Join(l, "|"), out, err)
		}
	}
	if out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "v"), middleware.Credentials()); err != nil || !out.Replayed {
		t.Fatalf("the same empty list: %+v, %v; want a replay", out, err)
	}
}

func TestCredentialsMismatchWhileTheFirstRuns(t *testing.T) {
	g := newGuard(t, memstore.New())
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := g.Execute(context.Background(), "k", fpA, func(context.Context) (middleware.Result, error) {
			close(started)
			<-finish
			return middleware.Result{Value: []byte("alice's receipt")}, nil
		}, middleware.Credentials("alice"))
		done <- err
	}()
	<-started
	var runs atomic.Int32
	out, err := g.Execute(t.Context(), "k", fpA, value(&runs, "x"), middleware.Credentials("bob"))
	wantCredentialsMismatch(t, "other credentials while the first runs", out, err)
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 0 {
		t.Fatal("fn ran for the other credentials")
	}
}

func TestRecordHoldsNoRawCredential(t *testing.T) {
	s := memstore.New()
	const token = "Bearer alice-secret-token"
	secret := []byte("0123456789abcdef0123456789abcdef")
	var runs atomic.Int32
	bindingOf := func(g *middleware.Guard, key string) string {
		t.Helper()
		if _, err := g.Execute(t.Context(), key, fpA, value(&runs, "v"), middleware.Credentials(token)); err != nil {
			t.Fatal(err)
		}
		rec, ok, err := s.Get(t.Context(), "idempotency::"+key)
		if err != nil || !ok {
			t.Fatalf("Get: %v, %v", ok, err)
		}
		if strings.Contains(rec.Fingerprint, "alice") || strings.Contains(string(rec.Response), "alice") {
			t.Fatalf("the record holds the credential: %q", rec.Fingerprint)
		}
		fp, binding, ok := strings.Cut(rec.Fingerprint, ";c=")
		if !ok || fp != fpA.String() || len(binding) != 32 {
			t.Fatalf("stored fingerprint %q; want %q, ';c=' and 32 characters", rec.Fingerprint, fpA.String())
		}
		return binding
	}
	plain := bindingOf(newGuard(t, s), "a")
	if other := bindingOf(newGuard(t, s), "b"); other == plain {
		t.Fatal("two record keys share a binding")
	}
	keyed := bindingOf(newGuard(t, s, middleware.WithSecret(secret)), "c")
	if keyed == plain {
		t.Fatal("the binding does not depend on the secret")
	}
	// Nodes agree: without a secret, and with the same one.
	if out, err := newGuard(t, s).Execute(t.Context(), "a", fpA, value(&runs, "x"), middleware.Credentials(token)); err != nil || !out.Replayed {
		t.Fatalf("another node without a secret: %+v, %v; want a replay", out, err)
	}
	if out, err := newGuard(t, s, middleware.WithSecret(secret)).Execute(t.Context(), "c", fpA, value(&runs, "x"), middleware.Credentials(token)); err != nil || !out.Replayed {
		t.Fatalf("another node with the same secret: %+v, %v; want a replay", out, err)
	}
	other := newGuard(t, s, middleware.WithSecret([]byte("another secret of 32 bytes......")))
	out, err := other.Execute(t.Context(), "c", fpA, value(&runs, "x"), middleware.Credentials(token))
	wantCredentialsMismatch(t, "a node with another secret", out, err)
}

func TestWithSecret(t *testing.T) {
	s := memstore.New()
	for _, secret := range [][]byte{nil, {}, []byte("15 bytes secret")} {
		if _, err := middleware.New(s, middleware.WithSecret(secret)); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("a secret of %d bytes: %v; want InvalidArgument", len(secret), err)
		}
	}
	secret := []byte("16 bytes secret!")
	ev := &events{}
	g := newGuard(t, s, middleware.WithSecret(secret), middleware.WithHook(ev))
	secret[0] = 'x' // the guard keeps a copy
	var runs atomic.Int32
	if _, err := g.Execute(t.Context(), "order-42", fpA, value(&runs, "v")); err != nil {
		t.Fatal(err)
	}
	want := idemkit.NewHMACHasher([]byte("16 bytes secret!")).Hash("order-42")
	if len(ev.list) != 1 || ev.list[0].KeyHash != want {
		t.Fatalf("events %+v; want the key hashed as %s", ev.list, want)
	}
}
