package httpsuite

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// envelope is an application's own error format, as a problem writer
// writes it: {"error": {"type", "code", "message", "doc_url",
// "retry_after"}}.
type envelope struct {
	Error struct {
		Type       string  `json:"type"`
		Code       string  `json:"code"`
		Message    string  `json:"message"`
		DocURL     string  `json:"doc_url"`
		Title      string  `json:"title"`
		RetryAfter float64 `json:"retry_after"`
	} `json:"error"`
}

// writeEnvelope is the problem writer of the suite.
func writeEnvelope(w http.ResponseWriter, _ *http.Request, p nethttp.Problem) {
	var e envelope
	e.Error.Type, e.Error.Code, e.Error.Message, e.Error.DocURL, e.Error.Title = "idempotency_error", p.Kind, p.Detail, p.Type, p.Title
	e.Error.RetryAfter = p.RetryAfter.Seconds()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(e)
}

// wantEnvelope checks that r is the envelope of a problem of the given
// status and kind, not to be cached, with Retry-After exactly when
// retryAfter is set.
func wantEnvelope(t *testing.T, r response, status int, kind, retryAfter string) envelope {
	t.Helper()
	var e envelope
	if err := json.Unmarshal([]byte(r.body), &e); err != nil || r.status != status {
		t.Fatalf("%d %q (%v); want %d and the application's envelope", r.status, r.body, err, status)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: Content-Type %q", kind, ct)
	}
	if cc := r.header.Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("%s: Cache-Control %q; want no-store", kind, cc)
	}
	if got := r.header.Get("Retry-After"); got != retryAfter {
		t.Fatalf("%s: Retry-After %q; want %q", kind, got, retryAfter)
	}
	if e.Error.Code != kind || e.Error.DocURL != defaultProblemTypeBase+kind || e.Error.Title == "" || e.Error.Type != "idempotency_error" {
		t.Fatalf("%s: envelope %+v", kind, e)
	}
	return e
}

// testProblemWriter: every answer the middleware writes itself (400, 409,
// 413, 422, 500 on a panic, 503) goes through the problem writer, with the
// status, the kind, the type URI, the title, the detail and Retry-After;
// the middleware sets Cache-Control: no-store and Retry-After around it.
func testProblemWriter(t *testing.T, s *suite) {
	srv := s.serve(t, nil, nethttp.WithProblemWriter(writeEnvelope), nethttp.WithKeyRequired(true),
		nethttp.WithMaxBodyBytes(100), nethttp.WithWaitForResult(false), nethttp.WithRetryAfter(3*time.Second))
	if e := wantEnvelope(t, srv.do(t, request{body: "{}"}), http.StatusBadRequest, "idempotency-key-missing", ""); !strings.Contains(e.Error.Message, "Idempotency-Key") {
		t.Fatalf("missing key: %q does not say what to send", e.Error.Message)
	}
	wantEnvelope(t, srv.do(t, request{key: []string{`"a", "b"`}, body: "{}"}), http.StatusBadRequest, "idempotency-key-malformed", "")
	wantEnvelope(t, srv.do(t, request{key: []string{"big"}, body: strings.Repeat("x", 101)}), http.StatusRequestEntityTooLarge, "request-body-too-large", "")
	srv.do(t, request{key: []string{"k"}, body: `{"a":1}`})
	wantEnvelope(t, srv.do(t, request{key: []string{"k"}, body: `{"a":2}`}), http.StatusUnprocessableEntity, "idempotency-key-reused", "")
	wantEnvelope(t, srv.do(t, request{key: []string{"k"}, body: `{"a":1}`, header: map[string]string{"Authorization": "Bearer bob"}}),
		http.StatusUnprocessableEntity, "idempotency-key-credentials-mismatch", "")

	stream := request{key: []string{"stream"}, path: "/orders?stream=1", body: "{}"}
	srv.do(t, stream)
	wantEnvelope(t, srv.do(t, stream), http.StatusConflict, "response-not-replayable", "")

	slow := request{key: []string{"slow"}, path: "/orders?sleep=300ms", body: "{}"}
	done := make(chan response, 1)
	go func() { done <- srv.do(t, slow) }()
	waitExecutions(t, srv, 3)
	if e := wantEnvelope(t, srv.do(t, slow), http.StatusConflict, "idempotency-key-in-progress", "3"); e.Error.RetryAfter != 3 {
		t.Fatalf("in progress: the writer got Retry-After %vs; want 3s", e.Error.RetryAfter)
	}
	<-done

	// A panic's 500 is written inside the guard, through the writer too.
	for range 2 {
		wantEnvelope(t, srv.do(t, request{key: []string{"panic"}, path: "/orders?panic=1", body: "{}"}), http.StatusInternalServerError, "internal-error", "")
	}
	wantExecutions(t, srv, 5)

	down := s.serve(t, []middleware.Option{}, nethttp.WithProblemWriter(writeEnvelope), nethttp.WithRetryAfter(2*time.Second))
	down.backends.Break()
	wantEnvelope(t, down.do(t, request{key: []string{"k"}, body: "{}"}), http.StatusServiceUnavailable, "idempotency-unavailable", "2")
	wantExecutions(t, down, 0)
}
