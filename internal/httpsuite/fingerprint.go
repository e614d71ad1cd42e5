package httpsuite

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
)

// Checks of what tells two requests apart, through a route of the
// adapter's framework that reads what the fingerprint must cover.

// transfer is the answer of a POST /transfer/<from>/<to> route.
type transfer struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// CheckEscapedSlashes checks that the route in the fingerprint is the path
// as the client sent it, escapes kept. baseURL serves POST
// /transfer/<from>/<to> behind the middleware, routed on the escaped path
// (ServeMux's {from}/{to}, echo, gin with UseRawPath), with a handler that
// answers 200 with the JSON {"from": from, "to": to}, the path values
// unescaped; executions reports how many times it ran.
//
// "/transfer/a%2Fb/c" is a transfer from "a/b" to "c", "/transfer/a/b%2Fc"
// one from "a" to "b/c": with the first's key, the second is a 422, never
// the first's answer; the first sent again replays; the second with a key
// of its own runs, as the transfer it is.
func CheckEscapedSlashes(t *testing.T, baseURL string, executions func() int32) {
	t.Helper()
	first := Post(t, baseURL+"/transfer/a%2Fb/c", "k", `{}`, "Content-Type", "application/json")
	wantTransfer(t, first, "a/b", "c")
	got := Post(t, baseURL+"/transfer/a/b%2Fc", "k", `{}`, "Content-Type", "application/json")
	WantProblem(t, got, http.StatusUnprocessableEntity, "idempotency-key-reused")
	if got := Post(t, baseURL+"/transfer/a%2Fb/c", "k", `{}`, "Content-Type", "application/json"); !got.Replayed() || got.Body != first.Body {
		t.Fatalf("the same escaped path again: %d %s replayed=%v; want a replay of %s", got.Status, got.Body, got.Replayed(), first.Body)
	}
	other := Post(t, baseURL+"/transfer/a/b%2Fc", "k2", `{}`, "Content-Type", "application/json")
	wantTransfer(t, other, "a", "b/c")
	if n := executions(); n != 2 {
		t.Fatalf("the handler ran %d times; want 2", n)
	}
}

// CheckEscapedSlashesBesideRawCharacters is [CheckEscapedSlashes] for
// paths that also hold a character a URL escapes but a client may send as
// it is ('{'), sent over a plain connection (Go's client would escape it),
// to a framework that routes on the path as received whatever it holds
// (echo, gin with UseRawPath): "/transfer/a%2Fb/{c}" and
// "/transfer/a/b%2F{c}" are different transfers.
func CheckEscapedSlashesBesideRawCharacters(t *testing.T, baseURL string) {
	t.Helper()
	first := rawPost(t, baseURL, "/transfer/a%2Fb/{c}", "raw")
	wantTransfer(t, first, "a/b", "{c}")
	got := rawPost(t, baseURL, "/transfer/a/b%2F{c}", "raw")
	WantProblem(t, got, http.StatusUnprocessableEntity, "idempotency-key-reused")
	if got := rawPost(t, baseURL, "/transfer/a%2Fb/{c}", "raw"); !got.Replayed() || got.Body != first.Body {
		t.Fatalf("the same path again: %d %s replayed=%v; want a replay of %s", got.Status, got.Body, got.Replayed(), first.Body)
	}
	wantTransfer(t, rawPost(t, baseURL, "/transfer/a/b%2F{c}", "raw2"), "a", "b/{c}")
}

// wantTransfer checks that r is a 200 for a transfer from from to to.
func wantTransfer(t *testing.T, r Reply, from, to string) {
	t.Helper()
	var got transfer
	if r.Status != http.StatusOK || json.Unmarshal([]byte(r.Body), &got) != nil || got != (transfer{from, to}) {
		t.Fatalf("%d %s; want 200 and a transfer from %q to %q", r.Status, r.Body, from, to)
	}
}

// rawPost sends POST target with the Idempotency-Key key and an empty JSON
// object, written as it is on a connection of its own to baseURL's server.
func rawPost(t *testing.T, baseURL, target, key string) Reply {
	t.Helper()
	u, err := url.Parse(baseURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := "POST " + target + " HTTP/1.1\r\nHost: " + u.Host + "\r\nIdempotency-Key: " + key +
		"\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("POST %s: %v", target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
}

// CheckCaseVariantMembers checks that members whose names a Go handler
// matches to one field, without regard to case, keep their order in the
// fingerprint. baseURL serves POST /orders/<id>/pay as for
// [CheckPathsUnderOnePattern]: a handler that decodes the JSON body into a
// struct with an Amount field (encoding/json, the framework's binding) and
// answers 200 with {"paid": "<id>", "amount": n}; executions reports how
// many times it ran.
//
// {"amount":1,"Amount":1000} is a payment of 1000 (the last match wins),
// {"Amount":1000,"amount":1} one of 1: with the first's key, the second is
// a 422, never the first's receipt; the first sent again replays; the
// second with a key of its own runs and pays 1.
func CheckCaseVariantMembers(t *testing.T, baseURL string, executions func() int32) {
	t.Helper()
	const thousand, one = `{"amount":1,"Amount":1000}`, `{"Amount":1000,"amount":1}`
	pay := func(key, body string) Reply {
		t.Helper()
		return Post(t, baseURL+"/orders/1/pay", key, body, "Content-Type", "application/json")
	}
	wantPaid := func(r Reply, body string, amount int) {
		t.Helper()
		var got struct {
			Amount *int `json:"amount"`
		}
		if r.Status != http.StatusOK || json.Unmarshal([]byte(r.Body), &got) != nil || got.Amount == nil || *got.Amount != amount {
			t.Fatalf("%s: %d %s; want a payment of %d", body, r.Status, r.Body, amount)
		}
	}
	first := pay("case", thousand)
	wantPaid(first, thousand, 1000)
	WantProblem(t, pay("case", one), http.StatusUnprocessableEntity, "idempotency-key-reused")
	if got := pay("case", thousand); !got.Replayed() || got.Body != first.Body {
		t.Fatalf("the same body again: %d %s replayed=%v; want a replay", got.Status, got.Body, got.Replayed())
	}
	wantPaid(pay("case2", one), one, 1)
	if n := executions(); n != 2 {
		t.Fatalf("the handler ran %d times; want 2", n)
	}
}
