package nethttp

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
)

// Problem types of the handler [NewAdmin] returns, besides
// [ProblemUnavailable] (503: the backend failed) and [ProblemInProgress]
// (409: a DELETE without force=1 of a key whose claim is live). Like the
// middleware's, they are the last part of each problem's "type" URI and
// stable.
const (
	ProblemAdminQueryInvalid = "admin-query-invalid"          // 400: the key is missing, empty, repeated or too long, or the query is malformed
	ProblemRecordNotFound    = "idempotency-record-not-found" // 404: the key has no live record
	ProblemMethodNotAllowed  = "method-not-allowed"           // 405: not GET, HEAD or DELETE (or DELETE on a read-only handler)
	ProblemResponseForbidden = "admin-response-forbidden"     // 403: response=1 on a handler that does not show responses
)

var adminProblemTitles = map[string]string{
	ProblemAdminQueryInvalid: "The query is invalid",
	ProblemRecordNotFound:    "The key has no record",
	ProblemMethodNotAllowed:  "Method not allowed",
	ProblemResponseForbidden: "Recorded responses are not shown here",
	ProblemInProgress:        "A request holds the key",
	ProblemUnavailable:       "Idempotency service is unavailable",
}

// AdminOption configures [NewAdmin].
type AdminOption func(*adminConfig)

type adminConfig struct {
	readOnly    bool
	responses   bool
	problemBase string
}

// WithAdminReadOnly makes the handler refuse DELETE (405), for a mount
// that may look at records but not forget them (a support team's).
// Default: false (DELETE forgets).
func WithAdminReadOnly(readOnly bool) AdminOption {
	return func(c *adminConfig) { c.readOnly = readOnly }
}

// WithAdminResponses sets whether GET shows a recorded response when asked
// with response=1; when false such a request is refused with 403
// admin-response-forbidden, for a mount whose users must not see the
// responses (they may hold personal data). Default: true.
func WithAdminResponses(allow bool) AdminOption {
	return func(c *adminConfig) { c.responses = allow }
}

// WithAdminProblemTypeBase sets the prefix of problem "type" URIs (see
// [WithProblemTypeBase]). Default: "urn:idemkit:problem:".
func WithAdminProblemTypeBase(base string) AdminOption {
	return func(c *adminConfig) { c.problemBase = base }
}

// NewAdmin returns an http.Handler for operators: it inspects and forgets
// one idempotency key of guard's records, through [middleware.Guard.Inspect]
// and [middleware.Guard.Forget].
//
// IT HAS NO AUTHENTICATION NOR AUTHORIZATION OF ITS OWN. Whoever reaches it
// can read the record of any key, the recorded response included (which
// may hold personal data, unless [WithAdminResponses] is false), and
// forget any record, so that the next request with that key runs its
// handler again. Mount it only behind your own authentication and
// authorization (an operators' role), preferably on an internal listener;
// never expose it as it is.
//
//	admin, err := nethttp.NewAdmin(guard)
//	...
//	internal.Handle("/admin/idempotency", requireOperator(admin))
//
// The key and its scope travel in the query, percent-encoded (so any key
// works, "/" included; url.Values.Encode does it), and the handler ignores
// the path, so it can be mounted under any prefix:
//
//	GET    ?key=K&scope=S             200 the record, as JSON (below); 404 idempotency-record-not-found
//	GET    ?key=K&scope=S&response=1  the same, with the recorded response
//	HEAD   (as GET)                   the status alone
//	DELETE ?key=K&scope=S             200 {"deleted":true}, or {"deleted":false} when there was no record;
//	                                  409 idempotency-key-in-progress when the key's claim is live
//	DELETE ?key=K&scope=S&force=1     the same, deleting a live claim too
//
// The scope is the one the guarded request had: the value of the
// middleware's [WithScope] hook, "" (or absent) without one. The key is the
// key itself, without the quotes of the header's string form. A missing,
// empty, repeated or too long key, a repeated or unknown parameter (a typo
// must not forget the key of another scope; response is GET's, force
// DELETE's, each "1" or "0") or an unparsable query is a
// 400 admin-query-invalid; another method a 405 with Allow; a failing
// backend a 503 idempotency-unavailable. Errors are
// application/problem+json; every answer carries Cache-Control: no-store.
//
// The record:
//
//	{
//	  "record_key": "idempotency:tenant-1:order-42",  the key in the backend
//	  "state":      "completed",       claimed (running), completed or not-replayable
//	  "algorithm":  "http-v2",         the fingerprint's algorithm
//	  "bound":      true,              bound to the credentials of the request that made it
//	  "fence":      1767225600000,     the claim's fence
//	  "created":    "2026-01-01T00:00:00Z",     when the claim or the outcome was written
//	  "expires":    "2026-01-02T00:00:00Z",     a claim: its lease's end; an outcome: when it is forgotten
//	  "size":       214,               bytes the response takes in the backend (sealed: its envelope)
//	  "sealed":     false,             the response is sealed (see store.Seal)
//	  "response":   "AQDJ...",         with response=1 only: the recorded bytes, base64 (standard, padded)
//	  "response_error": "..."          with response=1, when the response cannot be shown: sealed with
//	                                   a key the guard lacks, or sealed on a guard without seal keys
//	}
//
// The response is the encoding the guarded adapter stored (for this
// package's middleware: status, replayed headers and body, which
// [DecodeResponse] decodes), opened when the guard seals with a key that
// opens it.
//
// DELETE forgets an outcome, completed or not replayable, so that the next
// request with the key runs again. It refuses a live claim (see
// [middleware.Guard.Forget]), whose holder may still be running the
// handler and renewing its lease: deleting it would let a retry run the
// handler a second time while the first still runs. The refusal is a 409
// idempotency-key-in-progress problem whose detail gives the lease's end
// and whose "expires" member holds it (RFC 3339, as the record's): a
// holder that is gone frees the key then. force=1 deletes the claim
// anyway, for a holder known to be gone: its handler, if it still runs,
// cannot record its outcome.
//
// Each GET costs one backend round trip (two when a response asked for
// cannot be opened), each DELETE two (one with force=1, or when there is
// no record or a live claim), each bounded by the guard's op timeout.
//
// A nil guard or an invalid option is an error here (InvalidArgument).
func NewAdmin(guard *middleware.Guard, opts ...AdminOption) (http.Handler, error) {
	bad := func(detail string) (http.Handler, error) {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "nethttp", detail, nil)
	}
	if why, ok := validGuard(guard); !ok {
		return bad(why)
	}
	cfg := adminConfig{responses: true, problemBase: defaultProblemTypeBase}
	for _, o := range opts {
		if o == nil {
			return bad("an admin option is nil; remove it, or pass the option it was meant to be")
		}
		o(&cfg)
	}
	allow := "GET, HEAD, DELETE"
	if cfg.readOnly {
		allow = "GET, HEAD"
	}
	return &admin{guard: guard, cfg: cfg, allow: allow}, nil
}

// admin is the handler of NewAdmin.
type admin struct {
	guard *middleware.Guard
	cfg   adminConfig
	allow string // the Allow header of a 405
}

// adminRecord is the JSON form of a middleware.Inspection.
type adminRecord struct {
	RecordKey     string    `json:"record_key"`
	State         string    `json:"state"`
	Algorithm     string    `json:"algorithm"`
	Bound         bool      `json:"bound"`
	Fence         uint64    `json:"fence"`
	Created       time.Time `json:"created"`
	Expires       time.Time `json:"expires"`
	Size          int       `json:"size"`
	Sealed        bool      `json:"sealed"`
	Response      *[]byte   `json:"response,omitempty"`
	ResponseError string    `json:"response_error,omitempty"`
}

// adminQuery is what a request asks for.
type adminQuery struct {
	key, scope string
	response   bool // GET: show the response
	force      bool // DELETE: delete a live claim too
}

// ServeHTTP answers one operator request.
func (a *admin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		a.inspect(w, r)
	case r.Method == http.MethodDelete && !a.cfg.readOnly:
		a.forget(w, r)
	default:
		w.Header().Set("Allow", a.allow)
		a.problem(w, http.StatusMethodNotAllowed, ProblemMethodNotAllowed, "use "+a.allow)
	}
}

func (a *admin) inspect(w http.ResponseWriter, r *http.Request) {
	q, ok := a.query(w, r, true)
	if !ok {
		return
	}
	if q.response && !a.cfg.responses {
		a.problem(w, http.StatusForbidden, ProblemResponseForbidden, "this handler does not show recorded responses")
		return
	}
	in, found, err := a.guard.Inspect(r.Context(), q.scope, q.key, q.response)
	responseErr := ""
	if err != nil && q.response && errors.Is(err, store.ErrUnsealable) {
		// The record is there, its response cannot be opened: show the
		// rest, which is what an operator needs to decide to forget it.
		responseErr = err.Error()
		in, found, err = a.guard.Inspect(r.Context(), q.scope, q.key, false)
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	if !found {
		a.problem(w, http.StatusNotFound, ProblemRecordNotFound, "the key has no live record in this scope (never used, expired, released or forgotten)")
		return
	}
	rec := adminRecord{
		RecordKey: in.RecordKey, State: in.State.String(), Algorithm: in.Algorithm, Bound: in.Bound,
		Fence: uint64(in.Fence), Created: in.CreatedAt.UTC(), Expires: in.ExpiresAt.UTC(),
		Size: in.Size, Sealed: in.Sealed, ResponseError: responseErr,
	}
	switch {
	case !q.response || responseErr != "":
	case in.Sealed && in.Response == nil:
		rec.ResponseError = "the response is sealed, and this guard holds no seal keys to open it"
	default:
		b := in.Response
		if b == nil {
			b = []byte{}
		}
		rec.Response = &b
	}
	a.json(w, rec)
}

func (a *admin) forget(w http.ResponseWriter, r *http.Request) {
	q, ok := a.query(w, r, false)
	if !ok {
		return
	}
	var opts []middleware.ForgetOption
	if q.force {
		opts = append(opts, middleware.Force())
	}
	deleted, err := a.guard.Forget(r.Context(), q.scope, q.key, opts...)
	var live *middleware.LiveClaimError
	if errors.As(err, &live) {
		a.liveClaim(w, live)
		return
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	a.json(w, struct {
		Deleted bool `json:"deleted"`
	}{deleted})
}

// query reads the request's query, or answers 400 and reports false.
func (a *admin) query(w http.ResponseWriter, r *http.Request, inspect bool) (adminQuery, bool) {
	bad := func(detail string) (adminQuery, bool) {
		a.problem(w, http.StatusBadRequest, ProblemAdminQueryInvalid, detail)
		return adminQuery{}, false
	}
	values, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return bad("the query cannot be parsed: percent-encode the key and the scope (url.Values.Encode, encodeURIComponent)")
	}
	var q adminQuery
	for name, vs := range values {
		if len(vs) > 1 {
			return bad("the parameter " + strconv.Quote(name) + " is repeated")
		}
		switch v := vs[0]; {
		case name == "key":
			q.key = v
		case name == "scope":
			q.scope = v
		case name == "response" && inspect:
			if q.response, err = strconv.ParseBool(v); err != nil {
				return bad(`response must be "1" or "0"`)
			}
		case name == "force" && !inspect:
			if q.force, err = strconv.ParseBool(v); err != nil {
				return bad(`force must be "1" or "0"`)
			}
		default:
			return bad("unknown parameter " + strconv.Quote(name) + "; the parameters are key, scope, (GET) response and (DELETE) force")
		}
	}
	if q.key == "" {
		return bad("the key parameter is required and must not be empty")
	}
	return q, true
}

// fail answers a failed Inspect or Forget.
func (a *admin) fail(w http.ResponseWriter, err error) {
	if errors.Is(err, middleware.ErrInvalidKey) {
		// The guard's messages never repeat the key.
		a.problem(w, http.StatusBadRequest, ProblemAdminQueryInvalid, strings.TrimPrefix(err.Error(), middleware.ErrInvalidKey.Error()+": "))
		return
	}
	a.problem(w, http.StatusServiceUnavailable, ProblemUnavailable, err.Error())
}

// json writes v as a 200 application/json answer.
func (a *admin) json(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v) // adminRecord and {deleted} always marshal
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}

// liveClaim answers a DELETE refused because the key's claim is live: a
// 409 problem with the lease's end in its detail and, for scripts, in an
// "expires" member (an RFC 9457 extension, the record's "expires").
func (a *admin) liveClaim(w http.ResponseWriter, live *middleware.LiveClaimError) {
	expires := live.ExpiresAt.UTC()
	p := Problem{
		Status: http.StatusConflict, Kind: ProblemInProgress, Type: a.cfg.problemBase + ProblemInProgress,
		Title: adminProblemTitles[ProblemInProgress],
		Detail: "the key is claimed by a request that may still be running its handler; the claim's lease runs out at " +
			expires.Format(time.RFC3339Nano) + " unless its holder renews it: a holder that is gone frees the key then. " +
			"force=1 forgets it anyway: if its handler still runs, its outcome is not recorded and a retry runs the handler a second time",
	}
	h := w.Header()
	setProblemHeaders(h, p)
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	b, _ := json.Marshal(struct {
		Type    string    `json:"type"`
		Title   string    `json:"title"`
		Status  int       `json:"status"`
		Detail  string    `json:"detail"`
		Expires time.Time `json:"expires"`
	}{p.Type, p.Title, p.Status, p.Detail, expires})
	_, _ = w.Write(append(b, '\n'))
}

// problem writes an application/problem+json answer.
func (a *admin) problem(w http.ResponseWriter, status int, kind, detail string) {
	title := adminProblemTitles[kind]
	if title == "" {
		title = http.StatusText(status)
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	WriteProblem(w, nil, Problem{Status: status, Kind: kind, Type: a.cfg.problemBase + kind, Title: title, Detail: detail})
}
