package httpsuite

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/nethttp"
)

// The cases of key sources other than the header: a query parameter, a
// field of a JSON body, a function of the application's. Every source's
// keys are checked the same way (length, UTF-8, control characters).

func testQueryKey(t *testing.T, s *suite) {
	srv := s.serve(t, nil, nethttp.WithKey(nethttp.QueryKey("idempotency_key")))
	req := request{path: "/orders?idempotency_key=q-1", body: `{"a":1}`, ctype: "application/json"}
	first := srv.do(t, req)
	again := srv.do(t, req)
	if first.status != http.StatusCreated || !again.replayed() || again.body != first.body {
		t.Fatalf("first %d, retry %d replayed=%v", first.status, again.status, again.replayed())
	}
	// Percent-decoded, '+' a space.
	info := decodeCallInfo(t, srv.do(t, request{path: "/orders?callinfo=1&idempotency_key=a%2Fb+c", body: "{}"}))
	if info.Key != "a/b c" {
		t.Fatalf("the handler read the key %q; want %q", info.Key, "a/b c")
	}
	// Without the parameter (the header does not count): passed through.
	for range 2 {
		if r := srv.do(t, request{key: []string{"h"}, body: "{}"}); r.status != http.StatusCreated || r.replayed() {
			t.Fatalf("no query key: %d replayed=%v", r.status, r.replayed())
		}
	}
	wantExecutions(t, srv, 4)
	for name, query := range map[string]string{
		"repeated":         "idempotency_key=a&idempotency_key=a",
		"empty":            "idempotency_key=",
		"control":          "idempotency_key=a%01b",
		"invalid UTF-8":    "idempotency_key=%C3%28",
		"bad escape":       "idempotency_key=a%zz",
		"256 characters":   "idempotency_key=" + strings.Repeat("k", 256),
		"256 code points":  "idempotency_key=" + strings.Repeat("%C3%A9", 256),
		"percent in value": "idempotency_key=%",
		// 255 characters, but too long for a record key with the
		// namespace.
		"1020 bytes": "idempotency_key=" + strings.Repeat("%F0%9F%98%80", 255),
	} {
		t.Log(name)
		p := problem(t, srv.do(t, request{path: "/orders?" + query, body: "{}"}), http.StatusBadRequest, "idempotency-key-malformed")
		if p.Detail == "" {
			t.Fatalf("%s: the problem does not say what is wrong", name)
		}
	}
	if r := srv.do(t, request{path: "/orders?idempotency_key=" + strings.Repeat("%C3%A9", 255), body: "{}"}); r.status != http.StatusCreated {
		t.Fatalf("255 code points: %d %s", r.status, r.body)
	}
	wantExecutions(t, srv, 5)
}

func testJSONKey(t *testing.T, s *suite) {
	srv := s.serve(t, nil, nethttp.WithKey(nethttp.JSONKey("idempotency_key")), nethttp.WithMaxBodyBytes(300))
	first := srv.do(t, request{body: `{"idempotency_key":"j-1","amount":1}`, ctype: "application/json"})
	again := srv.do(t, request{body: `{ "amount": 1, "idempotency_key": "j-1" }`, ctype: "application/json"})
	if first.status != http.StatusCreated || !again.replayed() || again.body != first.body {
		t.Fatalf("first %d, retry %d replayed=%v", first.status, again.status, again.replayed())
	}
	problem(t, srv.do(t, request{body: `{"idempotency_key":"j-1","amount":2}`, ctype: "application/json"}), http.StatusUnprocessableEntity, "idempotency-key-reused")
	info := decodeCallInfo(t, srv.do(t, request{path: "/orders?callinfo=1", body: `{"idempotency_key":"caf\u00e9 \"1\""}`, ctype: "application/json"}))
	if info.Key != `café "1"` {
		t.Fatalf("the handler read the key %q", info.Key)
	}
	wantExecutions(t, srv, 2)
	// No key (the header does not count): passed through, with the body
	// the middleware read given back to the handler.
	for _, body := range []string{`{"amount":1}`, `{"idempotency_key":null}`, `not json`, `["idempotency_key","x"]`, `{"nested":{"idempotency_key":"x"}}`} {
		for range 2 {
			r := srv.do(t, request{key: []string{"h"}, body: body})
			if r.status != http.StatusCreated || r.replayed() || !strings.Contains(r.body, jsonString(body)) {
				t.Fatalf("body %s: %d replayed=%v %q; want it passed through with its body", body, r.status, r.replayed(), r.body)
			}
		}
	}
	wantExecutions(t, srv, 12)
	// The body is read before the key is known: too large is a 413, key
	// or not.
	problem(t, srv.do(t, request{body: `{"pad":"` + strings.Repeat("x", 300) + `"}`}), http.StatusRequestEntityTooLarge, "request-body-too-large")
	for name, body := range map[string]string{
		"a number":       `{"idempotency_key":12}`,
		"an object":      `{"idempotency_key":{"k":"v"}}`,
		"empty":          `{"idempotency_key":""}`,
		"twice":          `{"idempotency_key":"a","idempotency_key":"a"}`,
		"null then key":  `{"idempotency_key":null,"idempotency_key":"a"}`,
		"control":        `{"idempotency_key":"a\u0001b"}`,
		"lone surrogate": `{"idempotency_key":"a\ud800b"}`,
		"256 characters": `{"idempotency_key":"` + strings.Repeat("k", 256) + `"}`,
	} {
		t.Log(name)
		problem(t, srv.do(t, request{body: body, ctype: "application/json"}), http.StatusBadRequest, "idempotency-key-malformed")
	}
	wantExecutions(t, srv, 12)

	required := s.serve(t, nil, nethttp.WithKey(nethttp.JSONKey("idempotency_key")), nethttp.WithKeyRequired(true))
	p := problem(t, required.do(t, request{key: []string{"h"}, body: `{"amount":1}`}), http.StatusBadRequest, "idempotency-key-missing")
	if !strings.Contains(p.Detail, `"idempotency_key"`) {
		t.Fatalf("the problem %q does not name the field to send", p.Detail)
	}
	wantExecutions(t, required, 0)
}

// jsonString returns s as the app echoes it inside its JSON answer.
func jsonString(s string) string {
	return strings.NewReplacer(`"`, `\"`).Replace(s)
}

func testFuncKey(t *testing.T, s *suite) {
	// From the body: the text before the first ':'.
	fromBody := nethttp.FuncKey(func(_ *http.Request, body []byte) (string, error) {
		if bytes.HasPrefix(body, []byte("!")) {
			return "", errors.New("a reference must not start with '!'")
		}
		ref, _, ok := bytes.Cut(body, []byte(":"))
		if !ok {
			return "", nil
		}
		return string(ref), nil
	}, true)
	srv := s.serve(t, nil, nethttp.WithKey(fromBody))
	first := srv.do(t, request{body: "ord-7:pay 5"})
	if again := srv.do(t, request{body: "ord-7:pay 5"}); first.status != http.StatusCreated || !again.replayed() || again.body != first.body {
		t.Fatalf("first %d, retry %d replayed=%v", first.status, again.status, again.replayed())
	}
	for range 2 {
		if r := srv.do(t, request{body: "no reference"}); r.status != http.StatusCreated || r.replayed() || !strings.Contains(r.body, "no reference") {
			t.Fatalf("no key: %d replayed=%v %q; want it passed through with its body", r.status, r.replayed(), r.body)
		}
	}
	p := problem(t, srv.do(t, request{body: "!ord:x"}), http.StatusBadRequest, "idempotency-key-malformed")
	if p.Detail != "a reference must not start with '!'" {
		t.Fatalf("the problem's detail %q; want the function's error", p.Detail)
	}
	problem(t, srv.do(t, request{body: "a\x00b:x"}), http.StatusBadRequest, "idempotency-key-malformed")
	wantExecutions(t, srv, 3)

	// Not from the body: the function gets none, and a request without a
	// key keeps its body unread.
	fromHeader := nethttp.FuncKey(func(r *http.Request, body []byte) (string, error) {
		if body != nil {
			return "", errors.New("the function was given a body")
		}
		return r.Header.Get("X-Order-Ref"), nil
	}, false)
	hdr := s.serve(t, nil, nethttp.WithKey(fromHeader))
	ref := map[string]string{"X-Order-Ref": "ord-8"}
	first = hdr.do(t, request{body: "{}", header: ref})
	if again := hdr.do(t, request{body: "{}", header: ref}); first.status != http.StatusCreated || !again.replayed() {
		t.Fatalf("first %d, retry %d replayed=%v", first.status, again.status, again.replayed())
	}
	if r := hdr.do(t, request{key: []string{"h"}, body: "{}"}); r.status != http.StatusCreated || r.replayed() {
		t.Fatalf("no key: %d", r.status)
	}
	wantExecutions(t, hdr, 2)
}
