package nethttp

import (
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/middleware"
)

// Defaults of the middleware (each written on its option too).
const (
	defaultHeader           = "Idempotency-Key" // see HeaderKey
	defaultMaxKeyLength     = 255
	defaultMaxBodyBytes     = 1 << 20 // 1 MiB
	defaultMaxResponseBytes = 1 << 20 // 1 MiB
	defaultRetryAfter       = time.Second
)

// DefaultReplayHeaders returns the response headers a replay repeats by
// default (a fresh slice on every call): Content-Type, Location, ETag,
// Last-Modified, Link, Content-Language, Content-Location, and the headers
// a client needs to act on a recorded answer: Retry-After (when to follow
// a redirect, or to come back under a policy that records such answers),
// WWW-Authenticate (what a 403 insufficient_scope asks for), Allow (the
// methods a 405 accepts), Accept-Patch, Accept-Post and Accept-Encoding
// (the formats and codings a 415 accepts).
func DefaultReplayHeaders() []string {
	return []string{
		"Content-Type", "Location", "ETag", "Last-Modified", "Link", "Content-Language", "Content-Location",
		"Retry-After", "WWW-Authenticate", "Allow", "Accept-Patch", "Accept-Post", "Accept-Encoding",
	}
}

// neverReplayed are headers that are never recorded nor replayed,
// whatever the allow-list says: credentials (which must never reach
// another request, nor sit in the backend) and per-response or
// per-connection ones.
var neverReplayed = map[string]bool{
	"Authorization": true, "Proxy-Authorization": true, "Cookie": true, "Set-Cookie": true,
	"Date": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Keep-Alive": true, "Trailer": true, "Upgrade": true, "Idempotent-Replayed": true,
}

// StorePolicy says which outcomes are recorded, by status class. What is
// not recorded is delivered once and forgotten: the claim is released and a
// retry runs the handler again. See [WithStorePolicy] for the default.
type StorePolicy struct {
	Success     bool // 2xx
	Redirection bool // 3xx
	ClientError bool // 4xx
	ServerError bool // 5xx
	// TryAgain records, when its class does too, the answers that ask the
	// client to send the request again: 401 and 407 (with credentials), 408
	// (Request Timeout), 425 (Too Early), 428 (Precondition Required), 429
	// (Too Many Requests), 503 (Service Unavailable), and any other 4xx or
	// 5xx that carries a Retry-After header. When false, they are
	// delivered and forgotten whatever their class says: recorded, they
	// would answer every retry with the same key until the record expires,
	// and the retry they ask for could never succeed.
	TryAgain bool
	Panic    bool // the handler panicked (answered 500 by the middleware)
}

// stores reports whether an answer of status, with the response header h,
// is recorded.
func (p StorePolicy) stores(status int, h http.Header) bool {
	if !p.TryAgain && asksToTryAgain(status, h) {
		return false
	}
	switch {
	case status >= 500:
		return p.ServerError
	case status >= 400:
		return p.ClientError
	case status >= 300:
		return p.Redirection
	}
	return p.Success
}

// asksToTryAgain reports whether an answer asks the client to send the
// request again (see StorePolicy.TryAgain).
func asksToTryAgain(status int, h http.Header) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusProxyAuthRequired, http.StatusRequestTimeout, http.StatusTooEarly,
		http.StatusPreconditionRequired, http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	}
	return status >= 400 && len(h["Retry-After"]) > 0
}

// Option configures the middleware.
type Option func(*config)

type config struct {
	methods       map[string]bool
	key           KeySource
	required      bool
	strict        bool
	maxKeyLen     int
	scope         func(*http.Request) string
	route         func(*http.Request) string
	operation     func(*http.Request) string
	fingerprint   func(r *http.Request, route string, body []byte) fingerprint.Fingerprint
	maxBody       int64
	maxResponse   int
	replayHeaders map[string]bool
	policy        StorePolicy
	wait          bool
	failOpen      bool
	recordTTL     time.Duration // 0: the guard's
	retryAfter    time.Duration
	problemBase   string
	problemWriter func(w http.ResponseWriter, r *http.Request, p Problem)
	logger        *slog.Logger

	// credentialHeaders are the headers bound besides Authorization and
	// Cookie (canonical names, as given; set: WithCredentialHeaders was
	// used).
	credentialHeaders    []string
	credentialHeadersSet bool
}

func defaults() config {
	c := config{
		methods:     map[string]bool{http.MethodPost: true, http.MethodPatch: true},
		key:         HeaderKey(defaultHeader),
		maxKeyLen:   defaultMaxKeyLength,
		maxBody:     defaultMaxBodyBytes,
		maxResponse: defaultMaxResponseBytes,
		policy:      StorePolicy{Success: true, Redirection: true, ClientError: true},
		wait:        true,
		retryAfter:  defaultRetryAfter,
		problemBase: defaultProblemTypeBase,
	}
	WithReplayHeaders(DefaultReplayHeaders()...)(&c)
	return c
}

// WithMethods sets the guarded methods; others pass through. Method names
// are case-sensitive tokens, matched as clients send them ("POST"): a name
// with a lower-case letter guards nothing a client sends and is refused by
// [New], naming the upper-case form, and so is an empty list (to guard
// nothing, leave the middleware out). Other names in upper case (an
// extension method such as "QUERY") are accepted. Default: POST and PATCH.
func WithMethods(methods ...string) Option {
	return func(c *config) {
		c.methods = make(map[string]bool, len(methods))
		for _, m := range methods {
			c.methods[m] = true
		}
	}
}

// WithKey sets where a request's idempotency key is found: a header
// ([HeaderKey]), a query parameter ([QueryKey]), a field of a JSON body
// ([JSONKey]) or a function of yours ([FuncKey]). Whatever the source, a
// key is checked the same way ([WithMaxKeyLength], valid UTF-8, no control
// characters), and a bad one is refused with 400
// idempotency-key-malformed. Default: HeaderKey("Idempotency-Key").
func WithKey(source KeySource) Option { return func(c *config) { c.key = source } }

// WithKeyRequired makes a guarded request without a key a 400
// (idempotency-key-missing) that says what to send; nothing runs. Default:
// false: such a request is served unguarded (it runs every time, nothing
// is recorded), as the gRPC interceptor serves a call without a key, so
// adding the middleware to an API whose clients send no keys yet breaks
// none of them. Require keys once every client sends them.
func WithKeyRequired(required bool) Option { return func(c *config) { c.required = required } }

// WithStrictKeys accepts only RFC 8941 quoted strings as keys in a key
// header ([HeaderKey]); other key sources are not affected. Default: false
// (bare tokens such as an unquoted UUID are accepted too, and spell the
// same key as their quoted form).
func WithStrictKeys(strict bool) Option { return func(c *config) { c.strict = strict } }

// WithMaxKeyLength bounds a key's length in characters (Unicode code
// points), whatever its source; a longer key is refused with 400
// idempotency-key-malformed. Default: 255.
func WithMaxKeyLength(n int) Option { return func(c *config) { c.maxKeyLen = n } }

// WithScope sets the namespace a key lives in, from the request: typically
// the tenant or the authenticated principal (from the verified token or
// session, never from a header the client could set freely), so one
// client's key can never replay another client's response.
//
// Default: one namespace for the whole service, with every guarded request
// bound to its credentials: the values of its Authorization and Cookie
// headers (all lines of each, in order; an absent header counts as empty),
// the client certificate its TLS connection presented (mutual TLS), and
// the headers named by [WithCredentialHeaders] (X-Api-Key, say).
// A request whose credentials differ from those of the request that
// recorded the key (a missing header included: an anonymous record and a
// credentialed retry differ) is refused with 422
// idempotency-key-credentials-mismatch: never another caller's response,
// never a second execution. The guard stores only a keyed hash of them
// (see middleware.Credentials and middleware.WithSecret).
//
// A scope hook replaces that binding: the hook names the real principal,
// so a client whose token was refreshed between its retries still gets its
// replay. Use one whenever credentials change while a request is retried:
// browsers, whose cookies change with every response that sets one
// (analytics, session renewal), and clients of short-lived tokens.
func WithScope(scope func(r *http.Request) string) Option { return func(c *config) { c.scope = scope } }

// WithCredentialHeaders binds requests to the request headers named too,
// besides Authorization, Cookie and the client certificate, when no scope
// hook is set (see [WithScope]): the headers that identify a caller in
// your API, such as X-Api-Key or the user header an authenticating
// gateway sets. A request whose values differ from those of the request
// that recorded the key is refused with 422
// idempotency-key-credentials-mismatch, as for Authorization. These
// headers are never recorded nor replayed in a response, whatever
// [WithReplayHeaders] says. Repeated calls add up. [New] refuses a name
// that is not a header name, and this option together with WithScope (the
// scope replaces the binding, so the headers would be ignored). Default:
// none.
func WithCredentialHeaders(names ...string) Option {
	return func(c *config) {
		for _, n := range names {
			c.credentialHeaders = append(c.credentialHeaders, http.CanonicalHeaderKey(strings.TrimSpace(n)))
		}
		c.credentialHeadersSet = true
	}
}

// WithRoute sets how the route that goes into the fingerprint is found.
// Default: the path as the client sent it, escapes kept (r.URL.RawPath
// when it spells r.URL.Path, else r.URL.EscapedPath()), in every adapter.
// Not the decoded path: ServeMux, echo and gin (with UseRawPath) route on
// the escaped one, where "/transfer/a%2Fb/c" (from "a/b") and
// "/transfer/a/b%2Fc" (to "b/c") are different requests. Not the mux
// pattern: a pattern such as "/" or "POST /orders/{id}/pay" covers
// requests that must never replay each other's response (paying order 2
// with the key used for order 1 must be a 422, not order 1's receipt).
func WithRoute(route func(r *http.Request) string) Option { return func(c *config) { c.route = route } }

// WithOperation sets how a request's operation is named for hooks and
// telemetry (see middleware.Operation): it must have few distinct values,
// such as a route pattern, never a raw path with ids in it. Default: the
// ServeMux pattern that matched the request, behind its method when the
// pattern has none ("POST /orders/{id}"), or "" when the middleware runs
// before any ServeMux matched (around the whole mux); the gin and echo
// adapters default to the route gin and echo matched.
func WithOperation(operation func(r *http.Request) string) Option {
	return func(c *config) { c.operation = operation }
}

// WithFingerprint replaces the request fingerprint. Default: method, route,
// query, content type and body (canonical JSON for JSON bodies); see
// fingerprint.HTTP.
func WithFingerprint(f func(r *http.Request, route string, body []byte) fingerprint.Fingerprint) Option {
	return func(c *config) { c.fingerprint = f }
}

// WithMaxBodyBytes bounds the request body the middleware reads (and
// buffers for the handler); beyond it the answer is 413. Default: 1 MiB.
func WithMaxBodyBytes(n int64) Option { return func(c *config) { c.maxBody = n } }

// WithMaxResponseBytes bounds the response body kept for replay; a larger
// response is delivered and recorded as executed-not-replayable. It also
// bounds a response held until the handler's transaction commits
// (pgstore.Tx), which cannot be delivered in part: past it the handler's
// writes fail, its transaction is rolled back and the client gets 500
// transaction-response-too-large. Default: 1 MiB.
func WithMaxResponseBytes(n int) Option { return func(c *config) { c.maxResponse = n } }

// WithReplayHeaders sets the response headers a replay repeats. Default:
// [DefaultReplayHeaders] (Content-Type, Location, ETag, Last-Modified,
// Link, Content-Language, Content-Location, Retry-After,
// WWW-Authenticate, Allow, Accept-Patch, Accept-Post, Accept-Encoding).
// Credentials (Authorization, Proxy-Authorization, Cookie, Set-Cookie and
// the headers of [WithCredentialHeaders]), Date and hop-by-hop headers are
// never recorded nor replayed, whatever the list says. Content-Encoding,
// Vary and Cache-Control are always recorded and replayed: the first two
// describe the recorded bytes (a compressing middleware inside the guard
// records compressed bytes), and a replay without them would be garbage;
// Cache-Control keeps a replay from being cached where the first response
// was not (no-store, private). A recorded response with a Content-Encoding
// that the retry's Accept-Encoding does not accept is not replayed: the
// retry gets 409 response-not-replayable (the handler never runs again).
func WithReplayHeaders(names ...string) Option {
	return func(c *config) {
		c.replayHeaders = make(map[string]bool, len(names))
		for _, n := range names {
			n = http.CanonicalHeaderKey(strings.TrimSpace(n))
			if !neverReplayed[n] {
				c.replayHeaders[n] = true
			}
		}
	}
}

// WithStorePolicy sets which outcomes are recorded. Default: 2xx, 3xx and
// 4xx are recorded; 5xx, panics and the answers that ask the client to try
// again (401, 407, 408, 425, 428, 429, 503 and any 4xx or 5xx with
// Retry-After; see StorePolicy.TryAgain) are delivered and forgotten
// (StorePolicy{Success: true, Redirection: true, ClientError: true}), so a
// transient failure can be retried and a retry that does what the answer
// asked can succeed. A policy with every field true records everything,
// 5xx, 429 and panics included, as Stripe's API does: a retry always gets
// the first answer.
func WithStorePolicy(p StorePolicy) Option { return func(c *config) { c.policy = p } }

// WithWaitForResult makes a duplicate of a running request wait (up to the
// guard's wait budget) and then get its response. Set it to false to answer
// such duplicates 409 at once. Default: true.
func WithWaitForResult(wait bool) Option { return func(c *config) { c.wait = wait } }

// WithFailOpen lets requests through unguarded (see middleware.FailOpen)
// when the idempotency backend is unreachable: when it fails in a way that may pass (it cannot be
// reached, does not answer in time, or refuses for load:
// idemkit.Code.Transient). Other failures still answer 503, and so does a
// record that exists but cannot be read (a response sealed with a key this
// server lacks, or damaged): its request ran, and running it again is what
// idempotency is for. Default: false (fail closed: 503 with Retry-After, so
// a request is never run without knowing whether it already ran).
func WithFailOpen(open bool) Option { return func(c *config) { c.failOpen = open } }

// WithRecordTTL sets how long this middleware's outcomes are kept for
// replay (see middleware.RecordTTL), so that routes sharing one guard can
// keep their records for different times: a payment for days, a message
// for minutes. It must be at least 1 ms, or 0 for the default. Default: 0,
// the guard's record TTL (middleware.WithRecordTTL, itself 24 h by
// default).
func WithRecordTTL(d time.Duration) Option { return func(c *config) { c.recordTTL = d } }

// WithRetryAfter sets the Retry-After of 409 (in progress) and 503 answers,
// rounded up to whole seconds. Default: 1 s.
func WithRetryAfter(d time.Duration) Option { return func(c *config) { c.retryAfter = d } }

// WithProblemTypeBase sets the prefix of problem "type" URIs, for example
// the URL of your API's error documentation. Default:
// "urn:idemkit:problem:".
func WithProblemTypeBase(base string) Option { return func(c *config) { c.problemBase = base } }

// WithProblemWriter sets how the answers the middleware writes itself are
// written: every refusal (400, 409, 413, 422, 503) and the 500 of a
// handler that panicked before answering. It gets the request and the
// [Problem], and writes the status, the headers and the body, in whatever
// format the application's errors have (an envelope such as
// {"error": {"type": ..., "code": ..., "message": ...}}, say). Before it is
// called, the middleware sets Cache-Control: no-store and, when the problem
// has one, Retry-After; it may change them. It should answer with
// p.Status: clients decide by the status whether to retry, and when.
// Default: [WriteProblem], RFC 9457 application/problem+json; nil restores
// it.
func WithProblemWriter(write func(w http.ResponseWriter, r *http.Request, p Problem)) Option {
	return func(c *config) { c.problemWriter = write }
}

// WithLogger sets the logger for handler panics. Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// validate checks what the options say about the request methods and the
// credentials, and returns why they are wrong; it drops the credential
// headers bound anyway (and repeated ones) and keeps every credential
// header out of the replayed ones.
func (c *config) validate() (string, bool) {
	if len(c.methods) == 0 {
		return `WithMethods needs at least one method, such as "POST"; to guard nothing, leave the middleware out`, false
	}
	for _, m := range slices.Sorted(maps.Keys(c.methods)) {
		if !validHeaderName(m) {
			return fmt.Sprintf(`WithMethods: %q is not a method name (a token, such as "POST")`, m), false
		}
		if up := strings.ToUpper(m); up != m {
			return fmt.Sprintf("WithMethods: %q guards no request sent as %q (methods are case-sensitive); write %q", m, up, up), false
		}
	}
	if c.credentialHeadersSet && c.scope != nil {
		return "WithCredentialHeaders binds requests only without a scope hook, and WithScope is set: " +
			"drop WithCredentialHeaders, or make the scope hook name the principal those headers identify", false
	}
	if c.credentialHeadersSet && len(c.credentialHeaders) == 0 {
		return `WithCredentialHeaders needs at least one header name, such as "X-Api-Key"`, false
	}
	bound := map[string]bool{"Authorization": true, "Cookie": true}
	names := c.credentialHeaders[:0]
	for _, n := range c.credentialHeaders {
		if !validHeaderName(n) {
			return fmt.Sprintf(`WithCredentialHeaders: %q is not a header name (a token, such as "X-Api-Key")`, n), false
		}
		if !bound[n] {
			bound[n] = true
			names = append(names, n)
		}
		// A credential is never recorded nor replayed.
		delete(c.replayHeaders, n)
	}
	c.credentialHeaders = names
	return "", true
}

// validGuard reports why guard cannot serve: nil, or a zero
// middleware.Guard (declared, not made by middleware.New), which would
// fail on the first request rather than here.
func validGuard(guard *middleware.Guard) (string, bool) {
	switch {
	case guard == nil:
		return "a guard is required; make one with middleware.New", false
	case reflect.ValueOf(guard).Elem().IsZero():
		// New always sets the store and the defaults: only a Guard that
		// New did not make is all zero.
		return "the guard is a zero middleware.Guard; make it with middleware.New", false
	}
	return "", true
}
