package nethttp_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// adminClock is the fixed clock of the memory stores of the admin tests,
// so that fences and times are exact.
var adminClock = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// adminApp is an application behind the idempotency middleware and the
// admin handler of its guard, each on a real loopback server.
type adminApp struct {
	app, admin string        // base URLs
	runs       atomic.Int32  // executions of the application's handler
	started    chan struct{} // receives once a handler asked to block ("X-Block: 1") runs
	release    chan struct{} // closed to let it go on
}

// newAdminApp serves POST /orders/{id} behind nethttp.New(guard, opts...)
// and guard's admin handler. The handler answers 201 {"order":<n>}; for an
// "X-Stream: 1" request it marks its response not replayable, for an
// "X-Block: 1" request it waits for a.release once it has run, and an
// "X-Step: 1" request first records the step "charge" (result "ch_1").
func newAdminApp(t *testing.T, guard *middleware.Guard, opts []nethttp.Option, adminOpts ...nethttp.AdminOption) *adminApp {
	t.Helper()
	a := &adminApp{started: make(chan struct{}, 1), release: make(chan struct{})}
	mw, err := nethttp.New(guard, append([]nethttp.Option{nethttp.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := a.runs.Add(1)
		if r.Header.Get("X-Step") == "1" {
			if _, err := middleware.Step(r.Context(), "charge", func(context.Context) ([]byte, error) { return []byte("ch_1"), nil }); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		if r.Header.Get("X-Block") == "1" {
			a.started <- struct{}{}
			<-a.release
		}
		if r.Header.Get("X-Stream") == "1" {
			nethttp.MarkNotReplayable(w)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, n)
	})))
	app := httptest.NewServer(mux)
	t.Cleanup(app.Close)
	h, err := nethttp.NewAdmin(guard, adminOpts...)
	if err != nil {
		t.Fatal(err)
	}
	admin := httptest.NewServer(h)
	t.Cleanup(admin.Close)
	a.app, a.admin = app.URL, admin.URL
	return a
}

// adminGuard returns a guard over s (a memory store on adminClock when s
// is nil).
func adminGuard(t *testing.T, s store.Store, opts ...middleware.Option) *middleware.Guard {
	t.Helper()
	if s == nil {
		s = memstore.New(memstore.WithClock(func() time.Time { return adminClock }))
	}
	g, err := middleware.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// adminReply is an answer of a real HTTP round trip.
type adminReply struct {
	status int
	header http.Header
	body   []byte
}

// adminSend sends method url with header lines ("Name: value") and returns
// the answer.
func adminSend(t *testing.T, method, url, body string, header ...string) adminReply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range header {
		name, value, _ := strings.Cut(h, ": ")
		req.Header.Set(name, value)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return adminReply{resp.StatusCode, resp.Header, b}
}

// order posts an order with key, and returns the answer.
func (a *adminApp) order(t *testing.T, key string, header ...string) adminReply {
	t.Helper()
	header = append([]string{"Content-Type: application/json", "Idempotency-Key: " + strconv.Quote(key)}, header...)
	return adminSend(t, http.MethodPost, a.app+"/orders/1", `{"item":"book"}`, header...)
}

// call sends method to the admin handler with the query q.
func (a *adminApp) call(t *testing.T, method string, q url.Values) adminReply {
	t.Helper()
	return adminSend(t, method, a.admin+"/admin/idempotency?"+q.Encode(), "")
}

// inspect GETs the record of key in scope (response=1 with withResponse);
// it fails t unless the answer is a 200 JSON object, which it returns.
func (a *adminApp) inspect(t *testing.T, scope, key string, withResponse bool) map[string]any {
	t.Helper()
	q := url.Values{"key": {key}}
	if scope != "" {
		q.Set("scope", scope)
	}
	if withResponse {
		q.Set("response", "1")
	}
	r := a.call(t, http.MethodGet, q)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("GET: %d %v %s; want 200 application/json, no-store", r.status, r.header, r.body)
	}
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("GET: %v: %s", err, r.body)
	}
	return m
}

// forget DELETEs the record of key in scope and returns "deleted".
func (a *adminApp) forget(t *testing.T, scope, key string) bool {
	t.Helper()
	r := a.call(t, http.MethodDelete, url.Values{"key": {key}, "scope": {scope}})
	var m struct {
		Deleted *bool `json:"deleted"`
	}
	if err := json.Unmarshal(r.body, &m); r.status != http.StatusOK || err != nil || m.Deleted == nil {
		t.Fatalf("DELETE: %d %s (%v); want 200 {\"deleted\":bool}", r.status, r.body, err)
	}
	return *m.Deleted
}

// wantAdminProblem fails t unless r is a problem of status and kind.
func wantAdminProblem(t *testing.T, r adminReply, status int, kind string) {
	t.Helper()
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
		Title  string `json:"title"`
	}
	err := json.Unmarshal(r.body, &p)
	if r.status != status || err != nil || p.Status != status || p.Type != "urn:idemkit:problem:"+kind || p.Title == "" ||
		r.header.Get("Content-Type") != "application/problem+json" || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("answer %d %v %s; want a %d %s problem", r.status, r.header, r.body, status, kind)
	}
}

// responseOf decodes the base64 response of an inspection.
func responseOf(t *testing.T, m map[string]any) []byte {
	t.Helper()
	s, ok := m["response"].(string)
	if !ok {
		t.Fatalf("no response in %v", m)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAdminInspect inspects a completed record written by the middleware
// (a key with "/" in it, bound to the request's credentials): every field,
// the response only when asked for, HEAD with the status alone.
func TestAdminInspect(t *testing.T) {
	a := newAdminApp(t, adminGuard(t, nil), nil)
	const key = "orders/42"
	if r := a.order(t, key); r.status != http.StatusCreated {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	m := a.inspect(t, "", key, false)
	want := map[string]any{
		"record_key": "idempotency::orders/42", "state": "completed", "algorithm": "http-v2", "bound": true,
		"fence": float64(adminClock.UnixMilli()), "created": adminClock.Format(time.RFC3339Nano),
		"expires": adminClock.Add(24 * time.Hour).Format(time.RFC3339Nano), "sealed": false,
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %#v; want %#v", k, m[k], v)
		}
	}
	if _, ok := m["response"]; ok {
		t.Errorf("the response is shown without response=1: %v", m)
	}
	full := a.inspect(t, "", key, true)
	resp := responseOf(t, full)
	if !bytes.HasSuffix(resp, []byte(`{"order":1}`)) || !bytes.Contains(resp, []byte("application/json")) {
		t.Fatalf("response %q; want the recorded status, headers and body", resp)
	}
	if m["size"] != float64(len(resp)) || full["size"] != m["size"] {
		t.Fatalf("size %v; want the response's %d bytes", m["size"], len(resp))
	}
	// An unencoded "/" in the raw query works too.
	if r := adminSend(t, http.MethodGet, a.admin+"/any/prefix?key=orders/42", ""); r.status != http.StatusOK {
		t.Fatalf("GET with a raw key: %d %s", r.status, r.body)
	}
	if r := a.call(t, http.MethodHead, url.Values{"key": {key}}); r.status != http.StatusOK || len(r.body) != 0 {
		t.Fatalf("HEAD: %d %q; want 200 without a body", r.status, r.body)
	}
	wantAdminProblem(t, a.call(t, http.MethodGet, url.Values{"key": {"orders/43"}}), http.StatusNotFound, "idempotency-record-not-found")
}

// TestAdminScope: a key recorded under a tenant's scope (one with ':'
// and '%', which the record key escapes) is found in that scope only, and
// forgotten there only.
func TestAdminScope(t *testing.T) {
	tenant := func(r *http.Request) string { return r.Header.Get("X-Tenant") }
	a := newAdminApp(t, adminGuard(t, nil), []nethttp.Option{nethttp.WithScope(tenant)})
	const scope = "acme:eu%1"
	if r := a.order(t, "k", "X-Tenant: "+scope); r.status != http.StatusCreated {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	m := a.inspect(t, scope, "k", false)
	if m["record_key"] != "idempotency:acme%3Aeu%251:k" || m["bound"] != false {
		t.Fatalf("record %v; want the escaped scope, not bound", m)
	}
	wantAdminProblem(t, a.call(t, http.MethodGet, url.Values{"key": {"k"}}), http.StatusNotFound, "idempotency-record-not-found")
	wantAdminProblem(t, a.call(t, http.MethodGet, url.Values{"key": {"k"}, "scope": {"acme"}}), http.StatusNotFound, "idempotency-record-not-found")
	if a.forget(t, "", "k") || a.forget(t, "acme", "k") {
		t.Fatal("a key forgotten in another scope")
	}
	if !a.forget(t, scope, "k") {
		t.Fatal("the key was not forgotten in its scope")
	}
}

// TestAdminForget: a forgotten key has no record, a second DELETE reports
// there was none, and the next request with the key runs the handler
// again.
func TestAdminForget(t *testing.T) {
	a := newAdminApp(t, adminGuard(t, nil), nil)
	a.order(t, "k")
	if r := a.order(t, "k"); r.header.Get("Idempotent-Replayed") != "true" || a.runs.Load() != 1 {
		t.Fatalf("retry: %d %v, %d runs; want a replay", r.status, r.header, a.runs.Load())
	}
	if !a.forget(t, "", "k") {
		t.Fatal("DELETE of a recorded key: deleted false")
	}
	wantAdminProblem(t, a.call(t, http.MethodGet, url.Values{"key": {"k"}}), http.StatusNotFound, "idempotency-record-not-found")
	if a.forget(t, "", "k") {
		t.Fatal("DELETE of a forgotten key: deleted true")
	}
	if r := a.order(t, "k"); r.status != http.StatusCreated || string(r.body) != `{"order":2}` || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("after forget: %d %v %s; want a second execution", r.status, r.header, r.body)
	}
}

// TestAdminForgetNotReplayable: a key recorded as not replayable is
// refused 409 until it is forgotten; then the next request runs.
func TestAdminForgetNotReplayable(t *testing.T) {
	a := newAdminApp(t, adminGuard(t, nil), nil)
	if r := a.order(t, "k", "X-Stream: 1"); r.status != http.StatusCreated {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	r := a.order(t, "k", "X-Stream: 1")
	wantAdminProblem(t, r, http.StatusConflict, "response-not-replayable")
	m := a.inspect(t, "", "k", true)
	if m["state"] != "not-replayable" || m["size"] != float64(0) || m["response"] != "" {
		t.Fatalf("record %v; want not-replayable without a response", m)
	}
	if !a.forget(t, "", "k") {
		t.Fatal("deleted false")
	}
	if r := a.order(t, "k", "X-Stream: 1"); r.status != http.StatusCreated || a.runs.Load() != 2 {
		t.Fatalf("after forget: %d %s, %d runs; want a second execution", r.status, r.body, a.runs.Load())
	}
}

// TestAdminForgetRunningClaim: a claim shows as claimed with its lease.
// While its handler runs, a DELETE is refused: a 409
// idempotency-key-in-progress problem with the lease's end in its detail
// and its "expires" member; the claim stays, and a retry is told "in
// progress" rather than running the handler again. DELETE with force=1
// forgets it: its outcome is not recorded (the client still gets its
// answer), and a retry runs again.
func TestAdminForgetRunningClaim(t *testing.T) {
	a := newAdminApp(t, adminGuard(t, nil, middleware.WithLeaseTTL(time.Minute), middleware.WithWaitBudget(0)), nil)
	release := sync.OnceFunc(func() { close(a.release) })
	t.Cleanup(release) // before the servers close, should the test fail first
	first := make(chan adminReply, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, a.app+"/orders/1", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", `"k"`)
		req.Header.Set("X-Block", "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- adminReply{}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		first <- adminReply{resp.StatusCode, resp.Header, b}
	}()
	<-a.started
	expires := adminClock.Add(time.Minute).Format(time.RFC3339Nano)
	m := a.inspect(t, "", "k", true)
	if m["state"] != "claimed" || m["expires"] != expires || m["response"] != "" {
		t.Fatalf("running claim %v; want claimed until its lease's end", m)
	}

	for _, q := range []url.Values{{"key": {"k"}}, {"key": {"k"}, "force": {"0"}}} {
		r := a.call(t, http.MethodDelete, q)
		wantAdminProblem(t, r, http.StatusConflict, "idempotency-key-in-progress")
		var p struct {
			Detail  string `json:"detail"`
			Expires string `json:"expires"`
		}
		if err := json.Unmarshal(r.body, &p); err != nil || p.Expires != expires || !strings.Contains(p.Detail, expires) || !strings.Contains(p.Detail, "force=1") {
			t.Fatalf("DELETE %s of a running claim: %s; want its lease's end %s in detail and expires, and how to force", q.Encode(), r.body, expires)
		}
	}
	if m := a.inspect(t, "", "k", false); m["state"] != "claimed" || m["fence"] != float64(adminClock.UnixMilli()) {
		t.Fatalf("the claim after the refusals: %v; want it still there", m)
	}
	if r := a.order(t, "k"); r.status != http.StatusConflict || a.runs.Load() != 1 {
		t.Fatalf("a retry while the claim runs: %d %s, %d runs; want 409 in progress and one run", r.status, r.body, a.runs.Load())
	}

	if r := a.call(t, http.MethodDelete, url.Values{"key": {"k"}, "force": {"1"}}); r.status != http.StatusOK || string(r.body) != "{\"deleted\":true}\n" {
		t.Fatalf("DELETE with force=1: %d %s; want deleted", r.status, r.body)
	}
	release()
	if r := <-first; r.status != http.StatusCreated || string(r.body) != `{"order":1}` {
		t.Fatalf("the forgotten claim's answer: %d %s", r.status, r.body)
	}
	wantAdminProblem(t, a.call(t, http.MethodGet, url.Values{"key": {"k"}}), http.StatusNotFound, "idempotency-record-not-found")
	if r := a.order(t, "k"); string(r.body) != `{"order":2}` {
		t.Fatalf("retry: %d %s; want a second execution", r.status, r.body)
	}
}

// TestAdminSealed: a sealed record reports sealed=true and the size of its
// envelope; its response is opened by a guard with the key, and never
// shown (the rest is) by a guard without seal keys or with other keys.
func TestAdminSealed(t *testing.T) {
	base := memstore.New(memstore.WithClock(func() time.Time { return adminClock }))
	secret := func(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }
	key := store.SealKey{ID: "2026-q1", Secret: secret(1)}
	sealing, err := store.Seal(base, key)
	if err != nil {
		t.Fatal(err)
	}
	a := newAdminApp(t, adminGuard(t, sealing), nil)
	a.order(t, "k")
	m := a.inspect(t, "", "k", true)
	plain := responseOf(t, m)
	if !bytes.HasSuffix(plain, []byte(`{"order":1}`)) {
		t.Fatalf("opened response %q", plain)
	}
	envelope := float64(len(plain) + 51 + len(key.ID))
	if m["sealed"] != true || m["size"] != envelope || m["response_error"] != nil {
		t.Fatalf("sealed record %v; want sealed, size %v", m, envelope)
	}

	other, err := store.Seal(base, store.SealKey{ID: "other", Secret: secret(2)})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]store.Store{"no seal keys": base, "other keys": other} {
		b := newAdminApp(t, adminGuard(t, s), nil)
		m := b.inspect(t, "", "k", true)
		if _, shown := m["response"]; shown || m["response_error"] == nil || m["sealed"] != true || m["size"] != envelope || m["state"] != "completed" {
			t.Errorf("%s: %v; want the record without its response, and why", name, m)
		}
		if m := b.inspect(t, "", "k", false); m["response_error"] != nil || m["sealed"] != true {
			t.Errorf("%s, without response=1: %v", name, m)
		}
	}
	// A record that no longer opens can still be forgotten.
	b := newAdminApp(t, adminGuard(t, other), nil)
	if !b.forget(t, "", "k") {
		t.Fatal("deleted false")
	}
}

// TestAdminBadRequests: a bad query is a 400, another method a 405 with
// Allow.
func TestAdminBadRequests(t *testing.T) {
	a := newAdminApp(t, adminGuard(t, nil), nil)
	a.order(t, "k")
	for _, c := range []struct{ method, query string }{
		{http.MethodGet, ""},
		{http.MethodGet, "key="},
		{http.MethodGet, "scope=s"},
		{http.MethodGet, "key=k&key=j"},
		{http.MethodGet, "key=k&scope=a&scope=b"},
		{http.MethodGet, "key=k&scop=a"},
		{http.MethodGet, "key=k&response=maybe"},
		{http.MethodGet, "key=k;x"},
		{http.MethodGet, "key=%zz"},
		{http.MethodGet, "key=" + strings.Repeat("k", 1100)},
		{http.MethodDelete, ""},
		{http.MethodDelete, "key=k&response=1"},
		{http.MethodDelete, "key=k&key=k"},
		{http.MethodDelete, "key=k&force=yes"},
		{http.MethodGet, "key=k&force=1"},
	} {
		r := adminSend(t, c.method, a.admin+"?"+c.query, "")
		wantAdminProblem(t, r, http.StatusBadRequest, "admin-query-invalid")
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch} {
		r := adminSend(t, m, a.admin+"?key=k", "")
		wantAdminProblem(t, r, http.StatusMethodNotAllowed, "method-not-allowed")
		if r.header.Get("Allow") != "GET, HEAD, DELETE" {
			t.Errorf("%s: Allow %q", m, r.header.Get("Allow"))
		}
	}
	if m := a.inspect(t, "", "k", false); m["state"] != "completed" {
		t.Fatalf("the record after bad requests: %v", m)
	}
}

// TestAdminOptions: a read-only handler refuses DELETE, one without
// responses refuses response=1, the problem type base is the option's, and
// NewAdmin needs a guard.
func TestAdminOptions(t *testing.T) {
	g := adminGuard(t, nil)
	a := newAdminApp(t, g, nil, nethttp.WithAdminReadOnly(true), nethttp.WithAdminResponses(false))
	a.order(t, "k")
	r := a.call(t, http.MethodDelete, url.Values{"key": {"k"}})
	wantAdminProblem(t, r, http.StatusMethodNotAllowed, "method-not-allowed")
	if r.header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("Allow %q", r.header.Get("Allow"))
	}
	wantAdminProblem(t, a.call(t, http.MethodGet, url.Values{"key": {"k"}, "response": {"1"}}), http.StatusForbidden, "admin-response-forbidden")
	if m := a.inspect(t, "", "k", false); m["state"] != "completed" {
		t.Fatalf("record %v", m)
	}
	h, err := nethttp.NewAdmin(g, nethttp.WithAdminProblemTypeBase("https://example.com/problems/"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	r = adminSend(t, http.MethodGet, srv.URL+"?key=absent", "")
	if r.status != http.StatusNotFound || !bytes.Contains(r.body, []byte(`"type":"https://example.com/problems/idempotency-record-not-found"`)) {
		t.Fatalf("problem with a type base: %d %s", r.status, r.body)
	}
	if _, err := nethttp.NewAdmin(nil); !errors.Is(err, idemkit.ErrInvalidArgument) {
		t.Fatalf("NewAdmin(nil): %v; want InvalidArgument", err)
	}
	if _, err := nethttp.NewAdmin(&middleware.Guard{}); !errors.Is(err, idemkit.ErrInvalidArgument) || !strings.Contains(err.Error(), "middleware.New") {
		t.Fatalf("NewAdmin of a zero Guard: %v; want InvalidArgument naming middleware.New", err)
	}
	guard, err := middleware.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nethttp.NewAdmin(guard, nil); !errors.Is(err, idemkit.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil") {
		t.Fatalf("NewAdmin with a nil option: %v; want InvalidArgument naming the nil option", err)
	}
}

// An operator looks at a key a client complains about, then forgets it so
// that the client's retry runs again. The handler has no authentication of
// its own: mount it behind yours.
func ExampleNewAdmin() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := nethttp.New(guard)
	if err != nil {
		panic(err)
	}
	admin, err := nethttp.NewAdmin(guard)
	if err != nil {
		panic(err)
	}
	requireOperator := func(next http.Handler) http.Handler { // your own authentication
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer operator-token" {
				http.Error(w, "forbidden", http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	mux.Handle("/admin/idempotency", requireOperator(admin))

	serve := func(method, target string, header ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, target, nil)
		for i := 0; i < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		return w
	}
	serve("POST", "/orders", "Idempotency-Key", `"order/42"`)

	q := "/admin/idempotency?" + url.Values{"key": {"order/42"}}.Encode()
	fmt.Println(serve("GET", q).Code)
	var rec struct {
		State string `json:"state"`
	}
	_ = json.Unmarshal(serve("GET", q, "Authorization", "Bearer operator-token").Body.Bytes(), &rec)
	fmt.Println(rec.State)
	fmt.Print(serve("DELETE", q, "Authorization", "Bearer operator-token").Body)
	fmt.Println(serve("GET", q, "Authorization", "Bearer operator-token").Code)
	// Output:
	// 403
	// completed
	// {"deleted":true}
	// 404
}

// TestAdminInspectSteps: a running claim's recorded steps are in the
// inspection (name, size, the limits), their results only when the
// response is asked for.
func TestAdminInspectSteps(t *testing.T) {
	a := newAdminApp(t, adminGuard(t, nil, middleware.WithLeaseTTL(time.Minute), middleware.WithWaitBudget(0)), nil)
	release := sync.OnceFunc(func() { close(a.release) })
	t.Cleanup(release)
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequest(http.MethodPost, a.app+"/orders/1", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", `"k"`)
		req.Header.Set("X-Block", "1")
		req.Header.Set("X-Step", "1")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-a.started
	m := a.inspect(t, "", "k", false)
	steps, _ := m["steps"].([]any)
	if m["state"] != "claimed" || len(steps) != 1 || m["max_steps"] != float64(store.MaxSteps) ||
		m["max_step_bytes"] != float64(store.MaxStepBytes) || m["step_bytes"] != float64(len("charge")+4) {
		t.Fatalf("running claim with a step: %v", m)
	}
	if st := steps[0].(map[string]any); st["name"] != "charge" || st["size"] != float64(4) || st["result"] != nil {
		t.Fatalf("its step without the response: %v", st)
	}
	m = a.inspect(t, "", "k", true)
	if st := m["steps"].([]any)[0].(map[string]any); st["result"] != base64.StdEncoding.EncodeToString([]byte("ch_1")) {
		t.Fatalf("its step with the response: %v", st)
	}
	release()
	<-done
	if m := a.inspect(t, "", "k", false); m["state"] != "completed" || m["steps"] != nil {
		t.Fatalf("the outcome: %v; want it without steps", m)
	}
}
