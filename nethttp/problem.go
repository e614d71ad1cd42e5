package nethttp

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Problem kinds: the last part of each problem's "type" URI, stable for
// clients to match on; the table in docs/http.md says when each is sent.
const (
	problemKeyMissing          = "idempotency-key-missing"
	problemKeyMalformed        = "idempotency-key-malformed"
	problemBodyTooLarge        = "request-body-too-large"
	problemBodyUnreadable      = "request-body-unreadable"
	problemInProgress          = "idempotency-key-in-progress"
	problemKeyReused           = "idempotency-key-reused"
	problemCredentialsMismatch = "idempotency-key-credentials-mismatch"
	problemNotReplayable       = "response-not-replayable"
	problemUnavailable         = "idempotency-unavailable"
	problemInternal            = "internal-error"
	problemTransactionFailed   = "transaction-failed"
	problemTransactionConflict = "transaction-conflict"
	problemResponseTooLarge    = "transaction-response-too-large"
	problemMisconfigured       = "idempotency-misconfigured"
)

// defaultProblemTypeBase prefixes the problem types in "type" URIs.
const defaultProblemTypeBase = "urn:idemkit:problem:"

var problemTitles = map[string]string{
	problemKeyMissing:          "Idempotency-Key is required",
	problemKeyMalformed:        "Idempotency-Key is malformed",
	problemBodyTooLarge:        "Request body is too large",
	problemBodyUnreadable:      "Request body could not be read",
	problemInProgress:          "A request with this Idempotency-Key is in progress",
	problemKeyReused:           "Idempotency-Key is already used for another request",
	problemCredentialsMismatch: "Idempotency-Key was used with other credentials",
	problemNotReplayable:       "The request was executed but its response cannot be replayed",
	problemUnavailable:         "Idempotency service is unavailable",
	problemMisconfigured:       "Idempotency service is misconfigured",
	problemInternal:            "Internal error",
	problemTransactionFailed:   "The request's transaction failed and was rolled back",
	problemTransactionConflict: "The request's transaction conflicted with another and was rolled back",
	problemResponseTooLarge:    "The response is too large to hold until its transaction commits",
}

// Problem is an answer the middleware writes itself instead of the
// handler's: a refusal, the 500 of a panic, or the answer of a handler
// whose transaction did not commit. [WriteProblem] writes it as RFC 9457
// problem details; [WithProblemWriter] in the application's format.
type Problem struct {
	Status     int           // the HTTP status: 400, 409, 413, 422, 500 or 503
	Kind       string        // stable, for clients to match on: "idempotency-key-reused", … (docs/http.md)
	Type       string        // the type URI: the base of [WithProblemTypeBase] followed by Kind
	Title      string        // a short summary of the kind, the same for every occurrence
	Detail     string        // what happened to this request, and what to do about it; may be empty
	RetryAfter time.Duration // when positive, sent as Retry-After in whole seconds, rounded up
}

// Error returns the problem's title and detail: the echo adapters return a
// Problem as an error.
func (p Problem) Error() string {
	if p.Detail == "" {
		return "idempotency: " + p.Title
	}
	return "idempotency: " + p.Title + ": " + p.Detail
}

// WriteProblem writes p as an RFC 9457 application/problem+json answer
// with Cache-Control: no-store and, when p has one, Retry-After. It is the
// default of [WithProblemWriter], for a custom writer to fall back on.
func WriteProblem(w http.ResponseWriter, _ *http.Request, p Problem) {
	h := w.Header()
	setProblemHeaders(h, p)
	h.Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail,omitempty"`
	}{p.Type, p.Title, p.Status, p.Detail})
	_, _ = w.Write(append(b, '\n'))
}

// setProblemHeaders sets the headers every problem answer has, whoever
// writes its body (and drops a Content-Length a handler set).
func setProblemHeaders(h http.Header, p Problem) {
	h.Del("Content-Length")
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((p.RetryAfter+time.Second-1)/time.Second), 10))
	}
}

// writeProblem answers r with the problem of the given kind through the
// problem writer.
func (c *core) writeProblem(w http.ResponseWriter, r *http.Request, status int, kind, detail string, retryAfter time.Duration) {
	p := Problem{Status: status, Kind: kind, Type: c.cfg.problemBase + kind, Title: problemTitles[kind], Detail: detail, RetryAfter: retryAfter}
	setProblemHeaders(w.Header(), p)
	c.cfg.problemWriter(w, r, p)
}
