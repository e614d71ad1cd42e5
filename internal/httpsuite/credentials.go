package httpsuite

import (
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store"
)

// The cases of credentials: bound to the record without a scope hook,
// replaced by a scope hook, never recorded nor replayed.

// payment is the request Alice sends, and Bob copies.
const payment = `{"amount":100}`

// checkCredentialsBound runs the Alice and Bob case with the credential
// header name: Alice's request records her response; Bob, with the same
// key and body and his own credentials (or none), is refused with 422
// idempotency-key-credentials-mismatch, also while Alice's request still
// runs, and never sees her response; Alice's own retry replays; the
// handler ran once.
func checkCredentialsBound(t *testing.T, s *suite, name, alice, bob string, opts ...nethttp.Option) {
	srv := s.serve(t, nil, opts...)
	as := map[string]string{name: alice}
	req := request{key: []string{"pay-2024-0001"}, path: "/orders?sleep=300ms", body: payment, ctype: "application/json", header: as}
	first := make(chan response, 1)
	go func() { first <- srv.do(t, req) }()
	waitExecutions(t, srv, 1)
	refused := func(what string, header map[string]string) {
		t.Helper()
		r := req
		r.header = header
		got := srv.do(t, r)
		problem(t, got, http.StatusUnprocessableEntity, "idempotency-key-credentials-mismatch")
		if got.replayed() || strings.Contains(got.body, "order") || strings.Contains(got.body, "amount") {
			t.Fatalf("%s: %d %q; the first request's response leaked", what, got.status, got.body)
		}
	}
	refused("Bob while Alice's request runs", map[string]string{name: bob})
	a := <-first
	if a.status != http.StatusCreated || a.replayed() {
		t.Fatalf("Alice: %d %q", a.status, a.body)
	}
	refused("Bob", map[string]string{name: bob})
	other := req
	other.body, other.header = `{"amount":1}`, map[string]string{name: bob}
	got := srv.do(t, other)
	problem(t, got, http.StatusUnprocessableEntity, "idempotency-key-credentials-mismatch")
	refused("no credentials", nil)
	if again := srv.do(t, req); !again.replayed() || again.body != a.body {
		t.Fatalf("Alice's retry: %d %q; want her response replayed", again.status, again.body)
	}
	wantExecutions(t, srv, 1)

	// An anonymous record and a credentialed retry differ too.
	anon := request{key: []string{"anon"}, body: payment}
	if r := srv.do(t, anon); r.status != http.StatusCreated {
		t.Fatalf("anonymous: %d", r.status)
	}
	anon.header = as
	problem(t, srv.do(t, anon), http.StatusUnprocessableEntity, "idempotency-key-credentials-mismatch")
	wantExecutions(t, srv, 2)
}

func testCredentialsBindAuthorization(t *testing.T, s *suite) {
	checkCredentialsBound(t, s, "Authorization", "Bearer alice-token", "Bearer bob-token")
}

func testCredentialsBindCookie(t *testing.T, s *suite) {
	checkCredentialsBound(t, s, "Cookie", "session=alice-session", "session=bob-session")
}

// testCredentialHeadersBindIdentityHeaders: a header named by
// WithCredentialHeaders (X-Api-Key) binds the record as Authorization
// does, and is never recorded nor replayed, even when the allow-list
// names it.
func testCredentialHeadersBindIdentityHeaders(t *testing.T, s *suite) {
	checkCredentialsBound(t, s, "X-Api-Key", "alice-api-key", "bob-api-key", nethttp.WithCredentialHeaders("x-api-key"))

	srv := s.serve(t, nil, nethttp.WithCredentialHeaders("X-Api-Key"), nethttp.WithReplayHeaders("X-Api-Key", "Content-Type"))
	req := request{key: []string{"k"}, path: "/orders?echoauth=1", body: payment, header: map[string]string{"X-Api-Key": "alice-api-key"}}
	if first := srv.do(t, req); first.header.Get("X-Api-Key") != "alice-api-key" {
		t.Fatalf("first: X-Api-Key %q; want the handler's echo delivered", first.header.Get("X-Api-Key"))
	}
	rec, ok, err := srv.backends.Store.Get(t.Context(), "idempotency::k")
	if err != nil || !ok || strings.Contains(string(rec.Response), "alice-api-key") || strings.Contains(rec.Fingerprint, "alice-api-key") {
		t.Fatalf("the record (%v, %v) holds the API key: %q", ok, err, rec.Response)
	}
	if again := srv.do(t, req); !again.replayed() || again.header.Get("X-Api-Key") != "" {
		t.Fatalf("retry: replayed=%v X-Api-Key %q; want a replay without it", again.replayed(), again.header.Get("X-Api-Key"))
	}
}

// testCredentialsBindClientCertificate: over mutual TLS, two callers whose
// verified client certificates differ never get each other's response
// with the same key and request (refused as with other credentials), nor
// does a caller without a certificate; the certificate's owner replays.
func testCredentialsBindClientCertificate(t *testing.T, s *suite) {
	ca := testenv.NewCA(t)
	b := s.backends(t)
	g, err := middleware.New(b.Store)
	if err != nil {
		t.Fatal(err)
	}
	a := &app{}
	url, client := serveMutualTLS(t, s.stack(t, g, nil, a), ca)
	alice := &server{url: url, app: a, guard: g, backends: b, client: client(ca.Client(t, "alice"))}
	bob := &server{url: url, app: a, guard: g, backends: b, client: client(ca.Client(t, "bob"))}
	nobody := &server{url: url, app: a, guard: g, backends: b, client: client(tls.Certificate{})}

	req := request{key: []string{"pay-2024-0001"}, path: "/orders?sleep=300ms", body: payment, ctype: "application/json"}
	first := make(chan response, 1)
	go func() { first <- alice.do(t, req) }()
	waitExecutions(t, alice, 1)
	refused := func(what string, srv *server) {
		t.Helper()
		got := srv.do(t, req)
		problem(t, got, http.StatusUnprocessableEntity, "idempotency-key-credentials-mismatch")
		if got.replayed() || strings.Contains(got.body, "order") {
			t.Fatalf("%s: %d %q; Alice's response leaked", what, got.status, got.body)
		}
	}
	refused("Bob while Alice's request runs", bob)
	got := <-first
	if got.status != http.StatusCreated || got.replayed() {
		t.Fatalf("Alice: %d %q", got.status, got.body)
	}
	refused("Bob", bob)
	refused("no certificate", nobody)
	if again := alice.do(t, req); !again.replayed() || again.body != got.body {
		t.Fatalf("Alice's retry: %d %q; want her response replayed", again.status, again.body)
	}
	wantExecutions(t, alice, 1)
}

// testScopeReplacesCredentialBinding: with a scope hook that names the
// principal behind each token, Alice's retry under a refreshed token
// replays her response, and Bob's request with the same key runs in his
// own scope.
func testScopeReplacesCredentialBinding(t *testing.T, s *suite) {
	principals := map[string]string{"Bearer alice-token-1": "alice", "Bearer alice-token-2": "alice", "Bearer bob-token": "bob"}
	srv := s.serve(t, nil, nethttp.WithScope(func(r *http.Request) string { return principals[r.Header.Get("Authorization")] }))
	req := func(token string) request {
		return request{key: []string{"pay-2024-0001"}, body: payment, ctype: "application/json", header: map[string]string{"Authorization": token}}
	}
	alice := srv.do(t, req("Bearer alice-token-1"))
	if alice.status != http.StatusCreated || alice.replayed() {
		t.Fatalf("Alice: %d", alice.status)
	}
	if again := srv.do(t, req("Bearer alice-token-2")); !again.replayed() || again.body != alice.body {
		t.Fatalf("Alice's retry with a refreshed token: %d %q; want her response replayed", again.status, again.body)
	}
	bob := srv.do(t, req("Bearer bob-token"))
	if bob.status != http.StatusCreated || bob.replayed() || bob.body == alice.body {
		t.Fatalf("Bob: %d replayed=%v %q; want his own execution", bob.status, bob.replayed(), bob.body)
	}
	wantExecutions(t, srv, 2)
}

// testCredentialHeadersNeverRecorded: a handler that echoes the request's
// credentials in its response headers, under an allow-list that names
// them: the record holds none of them (nor the request's credentials
// anywhere), and a replay carries none of them, but carries the response's
// Cache-Control.
func testCredentialHeadersNeverRecorded(t *testing.T, s *suite) {
	srv := s.serve(t, nil, nethttp.WithReplayHeaders("Authorization", "Proxy-Authorization", "Set-Cookie", "Cookie", "Content-Type", "X-Custom"))
	req := request{key: []string{"k"}, path: "/orders?echoauth=1", body: payment, header: map[string]string{
		"Authorization": "Bearer alice-token", "Cookie": "session=alice-session",
	}}
	first := srv.do(t, req)
	if first.status != http.StatusCreated || first.header.Get("Authorization") != "Bearer alice-token" ||
		first.header.Get("Cache-Control") != "no-store, private" {
		t.Fatalf("first: %d %v", first.status, first.header)
	}
	rec, ok, err := srv.backends.Store.Get(t.Context(), "idempotency::k")
	if err != nil || !ok {
		t.Fatalf("the record: %v, %v", ok, err)
	}
	for _, secret := range []string{"alice-token", "alice-session", "session="} {
		if strings.Contains(rec.Fingerprint, secret) || strings.Contains(string(rec.Response), secret) {
			t.Fatalf("the record holds %q: fingerprint %q, response %q", secret, rec.Fingerprint, rec.Response)
		}
	}
	again := srv.do(t, req)
	if !again.replayed() || again.body != first.body {
		t.Fatalf("retry: %d %q; want a replay", again.status, again.body)
	}
	for _, h := range []string{"Authorization", "Proxy-Authorization", "Set-Cookie", "Cookie"} {
		if v := again.header.Values(h); len(v) != 0 {
			t.Fatalf("the replay carries %s: %q", h, v)
		}
	}
	if again.header.Get("Cache-Control") != "no-store, private" || again.header.Get("X-Custom") != first.header.Get("X-Custom") {
		t.Fatalf("replayed Cache-Control %q, X-Custom %q; want %q, %q", again.header.Get("Cache-Control"), again.header.Get("X-Custom"),
			"no-store, private", first.header.Get("X-Custom"))
	}
	wantExecutions(t, srv, 1)
}

// testUnreadableRecordNeverFailsOpen: a record that exists but cannot be
// opened (sealed with a key this node does not have) is answered 503 with
// "unreadable", never "cannot be reached", and with fail-open on, the
// handler does not run again.
func testUnreadableRecordNeverFailsOpen(t *testing.T, s *suite) {
	b := s.backends(t)
	seal := func(id string) Backends {
		sealed, err := store.Seal(b.Store, store.SealKey{ID: id, Secret: []byte(strings.Repeat(id, 16))})
		if err != nil {
			t.Fatal(err)
		}
		return Backends{Store: sealed, Break: b.Break}
	}
	a := &app{}
	writer := s.serveOn(t, seal("a"), a, nil)
	reader := s.serveOn(t, seal("b"), a, nil, nethttp.WithFailOpen(true))
	req := request{key: []string{"k"}, body: payment}
	if r := writer.do(t, req); r.status != http.StatusCreated {
		t.Fatalf("first: %d", r.status)
	}
	r := reader.do(t, req)
	p := problem(t, r, http.StatusServiceUnavailable, "idempotency-unavailable")
	if !strings.Contains(p.Detail, "unreadable") || strings.Contains(p.Detail, "reached") || strings.Contains(r.body, "order") {
		t.Fatalf("detail %q; want the recorded response unreadable", p.Detail)
	}
	wantExecutions(t, writer, 1)
}
