package httpsuite

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/memstore"
)

// The helpers below serve an adapter's own tests, for what only its
// framework can set up (route patterns, unmatched routes, the framework's
// context): they build a guard and a server, send requests and check the
// answers the same way for every adapter.

// Composed is a [NewBackends] on the composition of a plain record store
// with a lock provider (memstore's records and lock.New(memstore.New()),
// through middleware.Compose): the guard's backend for those who keep
// records in one place and locks in another.
func Composed(t *testing.T) Backends {
	records := memstore.New()
	locker, err := lock.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	s, err := middleware.Compose(records, locker)
	if err != nil {
		t.Fatal(err)
	}
	return Backends{Store: s, Break: func() { _ = records.Close() }}
}

// NewGuard returns a guard built with opts on a fresh [Memory] backend. It
// fails t if the options are invalid.
func NewGuard(t *testing.T, opts ...middleware.Option) *middleware.Guard {
	t.Helper()
	b := Memory(t)
	g, err := middleware.New(b.Store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Serve serves h on a real loopback listener until the test ends and
// returns the server's base URL.
func Serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// Reply is what a request got: the status, the header and the whole body.
type Reply struct {
	Status int
	Header http.Header
	Body   string
}

// Replayed reports whether the middleware answered with a replay
// (Idempotent-Replayed: true).
func (r Reply) Replayed() bool { return r.Header.Get("Idempotent-Replayed") == "true" }

// Post sends a POST of body to url with http.DefaultClient: with the
// Idempotency-Key key (none when key is empty) and the header fields in
// header, given as name, value pairs. It fails t if no answer comes.
func Post(t *testing.T, url, key, body string, header ...string) Reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return send(t, http.DefaultClient, req)
}

// send sends req with client and reads the whole answer.
func send(t *testing.T, client *http.Client, req *http.Request) Reply {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.RequestURI(), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
}

// WantProblem checks that r is an RFC 9457 problem of the given status and
// kind (one of the nethttp.Problem* constants, under the default type
// base), not to be cached.
func WantProblem(t *testing.T, r Reply, status int, kind string) {
	t.Helper()
	wantProblem(t, r, status, kind)
}

// problemBody is an RFC 9457 problem details object.
type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// defaultProblemTypeBase prefixes the problem types in "type" URIs unless
// nethttp.WithProblemTypeBase says otherwise.
const defaultProblemTypeBase = "urn:idemkit:problem:"

func wantProblem(t *testing.T, r Reply, status int, kind string) problemBody {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d (%s); want %d", r.Status, r.Body, status)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q; want application/problem+json", ct)
	}
	if cc := r.Header.Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("Cache-Control %q; want no-store", cc)
	}
	var p problemBody
	if err := json.Unmarshal([]byte(r.Body), &p); err != nil {
		t.Fatalf("problem body %q: %v", r.Body, err)
	}
	if p.Type != defaultProblemTypeBase+kind || p.Status != status || p.Title == "" {
		t.Fatalf("problem %+v; want type %s, status %d", p, kind, status)
	}
	return p
}

// invalidOptions are options that every adapter's constructor must refuse
// with an InvalidArgument error (and no middleware).
func invalidOptions() []nethttp.Option {
	return []nethttp.Option{
		nethttp.WithKey(nethttp.HeaderKey("bad header")),
		nethttp.WithKey(nethttp.KeySource{}),
		nethttp.WithKey(nethttp.QueryKey("")),
		nethttp.WithKey(nethttp.JSONKey("")),
		nethttp.WithKey(nethttp.FuncKey(nil, false)),
		nethttp.WithRecordTTL(-time.Hour),
		nethttp.WithRecordTTL(time.Microsecond),
		nethttp.WithMaxKeyLength(0),
		nethttp.WithMaxBodyBytes(0),
		nethttp.WithMaxResponseBytes(0),
		nethttp.WithRetryAfter(-1),
	}
}

// Build builds an adapter's middleware on guard with opts, for
// [CheckMisconfigurationsRefused], and returns the constructor's error.
type Build func(guard *middleware.Guard, opts ...nethttp.Option) error

// CheckMisconfigurationsRefused checks that build refuses, with an
// InvalidArgument error whose message names the fix, each setup that
// would otherwise guard nothing without a word or fail on the first
// request: a nil guard, a zero middleware.Guard (not made by
// middleware.New), a nil option, an empty method list, a method name in
// lower case, a method name that is no token, credential headers with a
// scope hook, none or with a name that is no token; that it refuses
// invalid values of the other options (key sources, TTLs, limits) with an
// InvalidArgument error; and that it still accepts the upper-case methods
// it refused in lower case, and header names in any case.
func CheckMisconfigurationsRefused(t *testing.T, build Build) {
	t.Helper()
	g := NewGuard(t)
	for _, c := range []struct {
		name  string
		guard *middleware.Guard
		opts  []nethttp.Option
		fix   string // a part of the error's message
	}{
		{"nil guard", nil, nil, "middleware.New"},
		{"zero guard", &middleware.Guard{}, nil, "make it with middleware.New"},
		{"nil option", g, []nethttp.Option{nethttp.WithKeyRequired(true), nil}, "an option is nil; remove it"},
		{"no methods", g, []nethttp.Option{nethttp.WithMethods(), nethttp.WithKeyRequired(true)}, `at least one method, such as "POST"`},
		{"lower-case method", g, []nethttp.Option{nethttp.WithMethods("post"), nethttp.WithKeyRequired(true)}, `write "POST"`},
		{"mixed-case method", g, []nethttp.Option{nethttp.WithMethods("POST", "Patch")}, `write "PATCH"`},
		{"no token", g, []nethttp.Option{nethttp.WithMethods("PO ST")}, "is not a method name"},
		{"credential headers with a scope", g, []nethttp.Option{
			nethttp.WithCredentialHeaders("X-Api-Key"), nethttp.WithScope(func(*http.Request) string { return "" }),
		}, "drop WithCredentialHeaders, or make the scope hook name the principal"},
		{"no credential header", g, []nethttp.Option{nethttp.WithCredentialHeaders()}, `at least one header name, such as "X-Api-Key"`},
		{"credential header no token", g, []nethttp.Option{nethttp.WithCredentialHeaders("X Api Key")}, "is not a header name"},
	} {
		err := build(c.guard, c.opts...)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !errors.Is(err, idemkit.ErrInvalidArgument) || !strings.Contains(err.Error(), c.fix) {
			t.Errorf("%s: %v; want an InvalidArgument error that says %q", c.name, err, c.fix)
		}
	}
	for i, o := range invalidOptions() {
		if err := build(g, o); !errors.Is(err, idemkit.ErrInvalidArgument) {
			t.Errorf("invalid option %d: %v; want an InvalidArgument error", i, err)
		}
	}
	if err := build(g, nethttp.WithMethods("POST", "PUT", "QUERY")); err != nil {
		t.Errorf("upper-case methods and an extension method: %v", err)
	}
	if err := build(g, nethttp.WithCredentialHeaders("x-api-key", "Authorization"), nethttp.WithCredentialHeaders("X-User")); err != nil {
		t.Errorf("credential headers: %v", err)
	}
}

// CheckPathsUnderOnePattern checks the middleware on a route with a path
// parameter. baseURL serves POST /orders/<id>/pay behind it, with a handler
// that binds the JSON body {"amount": n} and answers 200 with the JSON
// {"paid": "<id>", "amount": n}; executions reports how many times that
// handler ran. Paying order 2 with order 1's key is a mismatch (422),
// never order 1's receipt; the retry on order 1's path replays; the
// handler runs once.
func CheckPathsUnderOnePattern(t *testing.T, baseURL string, executions func() int32) {
	t.Helper()
	first := Post(t, baseURL+"/orders/1/pay", "k", `{"amount":5}`, "Content-Type", "application/json")
	if first.Status != http.StatusOK || !strings.Contains(first.Body, `"paid":"1"`) || !strings.Contains(first.Body, `"amount":5`) {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	if got := Post(t, baseURL+"/orders/2/pay", "k", `{"amount":5}`, "Content-Type", "application/json"); got.Status != http.StatusUnprocessableEntity {
		t.Fatalf("/orders/2/pay with order 1's key: %d %s; want 422", got.Status, got.Body)
	}
	if got := Post(t, baseURL+"/orders/1/pay", "k", `{"amount":5}`, "Content-Type", "application/json"); !got.Replayed() || got.Body != first.Body {
		t.Fatalf("the same path: %d %s; want a replay", got.Status, got.Body)
	}
	if n := executions(); n != 1 {
		t.Fatalf("ran %d times", n)
	}
}

// CheckUnmatchedRouteRecorded checks that the framework's 404 for a path
// no route matches, which goes through the middleware when it is
// installed globally, is recorded as a 404 (never as a 200) and replayed
// as the same 404. baseURL serves no route at /nowhere.
func CheckUnmatchedRouteRecorded(t *testing.T, baseURL string) {
	t.Helper()
	first := Post(t, baseURL+"/nowhere", "n", `{}`)
	again := Post(t, baseURL+"/nowhere", "n", `{}`)
	if first.Status != http.StatusNotFound || again.Status != http.StatusNotFound || !again.Replayed() || again.Body != first.Body {
		t.Fatalf("unmatched route: %d %q, then %d %q replayed=%v", first.Status, first.Body, again.Status, again.Body, again.Replayed())
	}
}

// CheckTenantScope checks a scope taken from the request's X-Tenant
// header (through whatever the framework carries it in). baseURL serves
// POST /orders behind the middleware with a handler whose every answer
// differs: one tenant's key never replays another tenant's response, and
// a tenant's own retry replays.
func CheckTenantScope(t *testing.T, baseURL string) {
	t.Helper()
	a := Post(t, baseURL+"/orders", "k", `{}`, "X-Tenant", "acme")
	b := Post(t, baseURL+"/orders", "k", `{}`, "X-Tenant", "globex")
	if b.Replayed() || a.Body == b.Body {
		t.Fatal("one tenant's key replayed another tenant's response")
	}
	if got := Post(t, baseURL+"/orders", "k", `{}`, "X-Tenant", "acme"); !got.Replayed() || got.Body != a.Body {
		t.Fatal("a tenant's retry did not replay")
	}
}

// CheckRequestDecompressedInFront checks the middleware behind a
// middleware that decompresses gzip request bodies (Content-Encoding: gzip)
// and leaves the request's ContentLength at the compressed size, as echo's
// Decompress does. baseURL serves POST /echo behind both, with a handler
// that answers 200 with the body it read. The handler gets the whole
// decompressed body, never one cut at the compressed length; the retry
// with the same content, compressed differently, replays (the fingerprint
// is the decompressed body's); a broken gzip stream is a 400
// request-body-unreadable, not a malformed key, and runs nothing.
func CheckRequestDecompressedInFront(t *testing.T, baseURL string) {
	t.Helper()
	plain := `{"note":"` + strings.Repeat("x", 2000) + `"}`
	post := func(key string, body []byte) Reply {
		t.Helper()
		return Post(t, baseURL+"/echo", key, string(body), "Content-Encoding", "gzip", "Content-Type", "application/json")
	}
	fast, best := gzipBytes(t, plain, gzip.BestSpeed), gzipBytes(t, plain, gzip.BestCompression)
	first := post("dz", fast)
	if first.Status != http.StatusOK || first.Body != plain {
		t.Fatalf("the handler read %d bytes (%d compressed); want the %d decompressed ones: status %d",
			len(first.Body), len(fast), len(plain), first.Status)
	}
	if again := post("dz", best); !again.Replayed() || again.Body != plain {
		t.Fatalf("the same content compressed otherwise: %d replayed=%v; want a replay", again.Status, again.Replayed())
	}
	broken := gzipBytes(t, `{"other":"`+strings.Repeat("y", 2000)+`"}`, gzip.BestSpeed)
	WantProblem(t, post("broken", broken[:len(broken)/2]), http.StatusBadRequest, "request-body-unreadable")
}

// gzipBytes compresses s at level.
func gzipBytes(t *testing.T, s string, level int) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, level)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
