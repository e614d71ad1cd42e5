package guardtest

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/internal/sweepertest"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// Log is a logger's output, kept for a test to read: give Logger() to
// middleware.WithLogger. It is safe for concurrent use; its Write and
// String are sweepertest.Logs'.
type Log struct{ sweepertest.Logs }

// Logger returns a JSON logger writing to l.
func (l *Log) Logger() *slog.Logger { return slog.New(slog.NewJSONHandler(l, nil)) }

// Lines returns the lines written so far whose message contains msg,
// decoded.
func (l *Log) Lines(t testing.TB, msg string) []map[string]any {
	t.Helper()
	text := l.String()
	var lines []map[string]any
	for _, s := range strings.Split(text, "\n") {
		if s == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("log line %q: %v", s, err)
		}
		if text, _ := m["msg"].(string); strings.Contains(text, msg) {
			lines = append(lines, m)
		}
	}
	return lines
}

// BackendFailureMessage is what every line the guard logs for a backend
// failure says.
const BackendFailureMessage = "idempotency: the backend"

// Serve serves POST /orders, answering 201, behind nethttp over g on a
// real listener, and returns the server's URL.
func Serve(t testing.TB, g *middleware.Guard) string {
	t.Helper()
	idem, err := nethttp.New(g)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", idem(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"ord_1"}`)
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// Answer is what a client got.
type Answer struct {
	Status     int
	RetryAfter string
	Type       string // the problem's type URI, for a problem answer
	Body       string
}

// Post sends POST /orders with the key to the server at url.
func Post(t testing.TB, url, key string) Answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/orders", strings.NewReader(`{"amount":1250}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", `"`+key+`"`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := Answer{Status: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After"), Body: string(body)}
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		var p struct{ Type string }
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatalf("problem %q: %v", body, err)
		}
		a.Type = p.Type
	}
	return a
}

// Outage is what a test expects of a backend that cannot serve.
type Outage struct {
	Requests int    // how many to send (distinct keys)
	Status   int    // the answer each must get: 503 or 500
	Kind     string // its problem kind (nethttp.Problem*)
	Code     string // the idemkit code the log line must name
	Words    []string
}

// CheckOutage sends o.Requests requests to the server at url (see Serve)
// and fails t unless each is answered o.Status with o.Kind, with a
// Retry-After exactly when the answer is 503, and unless log holds one
// line per cause of the backend failure (its "cause" attribute: the
// backend error's code and detail), each at level ERROR naming o.Code and
// holding every one of o.Words. Then it sends as many requests again and
// fails t if they logged anything: within the interval (the test's guard
// must have one longer than the test) a cause is logged once.
func CheckOutage(t testing.TB, url string, log *Log, o Outage) {
	t.Helper()
	send := func(batch int) {
		for i := range o.Requests {
			a := Post(t, url, fmt.Sprintf("outage-%d-%d", batch, i))
			if a.Status != o.Status || !strings.HasSuffix(a.Type, ":"+o.Kind) || (a.RetryAfter != "") != (o.Status == http.StatusServiceUnavailable) {
				t.Fatalf("request %d: %+v; want %d %s, with Retry-After only on a 503", i, a, o.Status, o.Kind)
			}
		}
	}
	send(1)
	lines := log.Lines(t, BackendFailureMessage)
	if len(lines) == 0 {
		t.Fatalf("%d failing requests logged no backend failure", o.Requests)
	}
	causes := map[string]bool{}
	for _, l := range lines {
		cause, _ := l["cause"].(string)
		errText, _ := l["error"].(string)
		if causes[cause] {
			t.Fatalf("the cause %q was logged twice within the interval:\n%v", cause, lines)
		}
		causes[cause] = true
		if l["level"] != "ERROR" || l["code"] != o.Code {
			t.Fatalf("the log line: %v; want an ERROR naming code %s", l, o.Code)
		}
		for _, w := range o.Words {
			if !strings.Contains(errText, w) {
				t.Fatalf("the log line does not say %q: %v", w, l)
			}
		}
		t.Logf("logged once: %s: %s", l["msg"], errText)
	}
	send(2)
	if again := log.Lines(t, BackendFailureMessage); len(again) != len(lines) {
		t.Fatalf("%d more failing requests of the same causes logged %d more lines within the interval; want none:\n%v",
			o.Requests, len(again)-len(lines), again[len(lines):])
	}
}
