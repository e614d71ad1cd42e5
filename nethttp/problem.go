package nethttp

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Problem types: the last part of each problem's "type" URI (see
// [WithProblemTypeBase]). They are stable: clients may match on them.
const (
	ProblemKeyMissing     = "idempotency-key-missing"     // 400: the key is required and absent
	ProblemKeyMalformed   = "idempotency-key-malformed"   // 400: the key cannot be parsed, or is too long or has control characters
	ProblemBodyTooLarge   = "request-body-too-large"      // 413: the body exceeds the limit
	ProblemBodyUnreadable = "request-body-unreadable"     // 400: the body could not be read (broken stream, client gone)
	ProblemInProgress     = "idempotency-key-in-progress" // 409: a request with the key is still running
	ProblemKeyReused      = "idempotency-key-reused"      // 422: the key was used for another request
	// ProblemCredentialsMismatch: 422; the key was used by a request with
	// other credentials (see [WithScope]).
	ProblemCredentialsMismatch = "idempotency-key-credentials-mismatch"
	ProblemNotReplayable       = "response-not-replayable" // 409: executed, but the response cannot be replayed
	ProblemUnavailable         = "idempotency-unavailable" // 503: the idempotency backend is unreachable
	ProblemInternal            = "internal-error"          // 500: the handler panicked before answering
	// ProblemTransactionFailed: 500; the handler's own transaction
	// (pgstore.Tx) failed at its commit (a statement it let fail, a
	// deferred constraint) and was rolled back: nothing of it was kept,
	// and a retry runs the handler again.
	ProblemTransactionFailed = "transaction-failed"
	// ProblemTransactionConflict: 409 with Retry-After; the handler's own
	// transaction lost a conflict with a concurrent one (a serialization
	// failure, a deadlock) and was rolled back: a retry with the same key
	// runs the handler again.
	ProblemTransactionConflict = "transaction-conflict"
	// ProblemResponseTooLarge: 500; the handler's transaction was rolled
	// back because its response was larger than the response limit
	// ([WithMaxResponseBytes]), the most that is held until the commit.
	ProblemResponseTooLarge = "transaction-response-too-large"
	// ProblemMisconfigured: 500; the idempotency backend refuses the
	// service until an operator fixes its setup (a missing table, refused
	// credentials or permissions): retrying cannot help. The server's log
	// says what is wrong.
	ProblemMisconfigured = "idempotency-misconfigured"
)

// defaultProblemTypeBase prefixes the problem types in "type" URIs.
const defaultProblemTypeBase = "urn:idemkit:problem:"

var problemTitles = map[string]string{
	ProblemKeyMissing:          "Idempotency-Key is required",
	ProblemKeyMalformed:        "Idempotency-Key is malformed",
	ProblemBodyTooLarge:        "Request body is too large",
	ProblemBodyUnreadable:      "Request body could not be read",
	ProblemInProgress:          "A request with this Idempotency-Key is in progress",
	ProblemKeyReused:           "Idempotency-Key is already used for another request",
	ProblemCredentialsMismatch: "Idempotency-Key was used with other credentials",
	ProblemNotReplayable:       "The request was executed but its response cannot be replayed",
	ProblemUnavailable:         "Idempotency service is unavailable",
	ProblemMisconfigured:       "Idempotency service is misconfigured",
	ProblemInternal:            "Internal error",
	ProblemTransactionFailed:   "The request's transaction failed and was rolled back",
	ProblemTransactionConflict: "The request's transaction conflicted with another and was rolled back",
	ProblemResponseTooLarge:    "The response is too large to hold until its transaction commits",
}

// Problem is an answer the middleware writes itself, instead of the
// handler's: a refusal (400, 409, 413, 422, 503; 500 for a misconfigured
// backend), the 500 of a handler that panicked before answering, or the
// answer of a handler whose transaction did not commit (500, 409).
// [WriteProblem] writes it as RFC 9457 problem details; [WithProblemWriter]
// lets an application write it in its own error format.
type Problem struct {
	Status int    // the HTTP status: 400, 409, 413, 422, 500 or 503
	Kind   string // one of the Problem* constants, such as [ProblemKeyReused]: stable, for clients to match on
	Type   string // the type URI: the base of [WithProblemTypeBase] followed by Kind
	Title  string // a short summary of the kind, the same for every occurrence
	Detail string // what happened to this request, and what to do about it; may be empty
	// RetryAfter, when positive, is how long the client should wait before
	// retrying (409 in progress, 503); the Retry-After header carries it
	// in whole seconds, rounded up.
	RetryAfter time.Duration
}

// WriteProblem writes p as an RFC 9457 application/problem+json answer
// ({"type", "title", "status", "detail"}) with Cache-Control: no-store
// and, when p.RetryAfter is positive, Retry-After. It is the default of
// [WithProblemWriter], there for a custom writer to fall back on.
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
// writes its body: Cache-Control: no-store, Retry-After when p has one,
// and no Content-Length a handler may have set.
func setProblemHeaders(h http.Header, p Problem) {
	h.Del("Content-Length")
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((p.RetryAfter+time.Second-1)/time.Second), 10))
	}
}

// writeProblem answers r with the problem of the given kind through the
// problem writer, after setting the headers every problem answer has.
func (c *Core) writeProblem(w http.ResponseWriter, r *http.Request, status int, kind, detail string, retryAfter time.Duration) {
	p := Problem{Status: status, Kind: kind, Type: c.cfg.problemBase + kind, Title: problemTitles[kind], Detail: detail, RetryAfter: retryAfter}
	setProblemHeaders(w.Header(), p)
	c.cfg.problemWriter(w, r, p)
}
