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

// Problem types of [NewAdmin]'s answers, besides [problemUnavailable] and
// [problemInProgress] (docs/operations.md lists them).
const (
	problemAdminQueryInvalid = "admin-query-invalid"          // 400
	problemRecordNotFound    = "idempotency-record-not-found" // 404
	problemMethodNotAllowed  = "method-not-allowed"           // 405
	problemResponseForbidden = "admin-response-forbidden"     // 403
)

var adminProblemTitles = map[string]string{
	problemAdminQueryInvalid: "The query is invalid",
	problemRecordNotFound:    "The key has no record",
	problemMethodNotAllowed:  "Method not allowed",
	problemResponseForbidden: "Recorded responses are not shown here",
	problemInProgress:        "A request holds the key",
	problemUnavailable:       "Idempotency service is unavailable",
}

// AdminOption configures [NewAdmin].
type AdminOption func(*adminConfig)

type adminConfig struct {
	readOnly    bool
	responses   bool
	problemBase string
}

// WithAdminReadOnly makes the handler refuse DELETE (405). Default: false.
func WithAdminReadOnly(readOnly bool) AdminOption {
	return func(c *adminConfig) { c.readOnly = readOnly }
}

// WithAdminResponses sets whether GET shows a recorded response when asked
// with response=1 (else 403): responses may hold personal data. Default:
// true.
func WithAdminResponses(allow bool) AdminOption {
	return func(c *adminConfig) { c.responses = allow }
}

// WithAdminProblemTypeBase sets the prefix of problem "type" URIs (see
// [WithProblemTypeBase]). Default: "urn:idemkit:problem:".
func WithAdminProblemTypeBase(base string) AdminOption {
	return func(c *adminConfig) { c.problemBase = base }
}

// NewAdmin returns an http.Handler for operators that inspects (GET
// ?key=K&scope=S[&response=1]) and forgets (DELETE ?key=K&scope=S[&force=1])
// one key's record through [middleware.Guard.Inspect] and
// [middleware.Guard.Forget]; docs/operations.md describes its answers.
//
// IT HAS NO AUTHENTICATION NOR AUTHORIZATION OF ITS OWN: whoever reaches
// it can read any record, response included, and forget it. Mount it only
// behind your own, preferably on an internal listener.
//
//	admin, err := nethttp.NewAdmin(guard)
//	...
//	internal.Handle("/admin/idempotency", requireOperator(admin))
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

	// A claim's recorded steps, with the limits they count against;
	// omitted when it has none.
	Steps        []adminStep `json:"steps,omitempty"`
	StepBytes    int         `json:"step_bytes,omitempty"`
	MaxSteps     int         `json:"max_steps,omitempty"`
	MaxStepBytes int         `json:"max_step_bytes,omitempty"`
}

// adminStep is one recorded step of a claim: its result only when the
// response was asked for.
type adminStep struct {
	Name   string  `json:"name"`
	Size   int     `json:"size"`
	Result *[]byte `json:"result,omitempty"`
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
		a.problem(w, http.StatusMethodNotAllowed, problemMethodNotAllowed, "use "+a.allow)
	}
}

func (a *admin) inspect(w http.ResponseWriter, r *http.Request) {
	q, ok := a.query(w, r, true)
	if !ok {
		return
	}
	if q.response && !a.cfg.responses {
		a.problem(w, http.StatusForbidden, problemResponseForbidden, "this handler does not show recorded responses")
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
		a.problem(w, http.StatusNotFound, problemRecordNotFound, "the key has no live record in this scope (never used, expired, released or forgotten)")
		return
	}
	rec := adminRecord{
		RecordKey: in.RecordKey, State: in.State.String(), Algorithm: in.Algorithm, Bound: in.Bound,
		Fence: uint64(in.Fence), Created: in.CreatedAt.UTC(), Expires: in.ExpiresAt.UTC(),
		Size: in.Size, Sealed: in.Sealed, ResponseError: responseErr,
	}
	for _, st := range in.Steps {
		as := adminStep{Name: st.Name, Size: st.Size}
		if q.response && st.Result != nil {
			b := st.Result
			as.Result = &b
		}
		rec.Steps = append(rec.Steps, as)
		rec.StepBytes += len(st.Name) + st.Size
	}
	if len(rec.Steps) > 0 {
		rec.MaxSteps, rec.MaxStepBytes = store.MaxSteps, store.MaxStepBytes
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
		a.problem(w, http.StatusBadRequest, problemAdminQueryInvalid, detail)
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
		a.problem(w, http.StatusBadRequest, problemAdminQueryInvalid, strings.TrimPrefix(err.Error(), middleware.ErrInvalidKey.Error()+": "))
		return
	}
	a.problem(w, http.StatusServiceUnavailable, problemUnavailable, err.Error())
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
		Status: http.StatusConflict, Kind: problemInProgress, Type: a.cfg.problemBase + problemInProgress,
		Title: adminProblemTitles[problemInProgress],
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
