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
	ProblemKeyMalformed   = "idempotency-key-malformed"   // 400: the key header cannot be parsed
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
)

// defaultProblemTypeBase prefixes the problem types in "type" URIs.
const defaultProblemTypeBase = "urn:idemkit:problem:"

// problem is an RFC 9457 problem details object.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

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
	ProblemInternal:            "Internal error",
}

// writeProblem writes an application/problem+json answer that is never
// cached, with Retry-After when retryAfter > 0.
func (c *Core) writeProblem(w http.ResponseWriter, status int, kind, detail string, retryAfter time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
	}
	w.WriteHeader(status)
	b, _ := json.Marshal(problem{Type: c.cfg.problemBase + kind, Title: problemTitles[kind], Status: status, Detail: detail})
	_, _ = w.Write(append(b, '\n'))
}
