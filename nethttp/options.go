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
// default, a fresh slice: the representation's headers and those a client
// needs to act on a recorded answer (docs/http.md says why each).
func DefaultReplayHeaders() []string {
	return []string{
		"Content-Type", "Location", "ETag", "Last-Modified", "Link", "Content-Language", "Content-Location",
		"Retry-After", "WWW-Authenticate", "Allow", "Accept-Patch", "Accept-Post", "Accept-Encoding",
	}
}

// neverReplayed are never recorded nor replayed, whatever the allow-list
// says: credentials, and per-response or per-connection headers.
var neverReplayed = map[string]bool{
	"Authorization": true, "Proxy-Authorization": true, "Cookie": true, "Set-Cookie": true,
	"Date": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Keep-Alive": true, "Trailer": true, "Upgrade": true, "Idempotent-Replayed": true,
}

// StorePolicy says which outcomes are recorded, by status class; the rest
// are delivered once and forgotten (a retry runs the handler again).
type StorePolicy struct {
	Success     bool // 2xx
	Redirection bool // 3xx
	ClientError bool // 4xx
	ServerError bool // 5xx
	// TryAgain records, when its class does too, the answers that ask the
	// client to send the request again (401, 407, 408, 425, 428, 429, 503,
	// any 4xx or 5xx with Retry-After); recorded, the retry they ask for
	// could never succeed.
	TryAgain bool
	Panic    bool // the handler panicked (answered 500 by the middleware)
}

// stores reports whether an answer is recorded.
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

// asksToTryAgain: see StorePolicy.TryAgain.
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

	credentialHeaders    []string // bound besides Authorization and Cookie
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

// WithMethods sets the guarded methods; others pass through. [New]
// refuses an empty list and a name with a lower-case letter (methods are
// case-sensitive: it would guard nothing a client sends). Default: POST
// and PATCH.
func WithMethods(methods ...string) Option {
	return func(c *config) {
		c.methods = make(map[string]bool, len(methods))
		for _, m := range methods {
			c.methods[m] = true
		}
	}
}

// WithKey sets where a request's idempotency key is found. Every source's
// keys are checked alike ([WithMaxKeyLength], valid UTF-8, no control
// characters; else 400 idempotency-key-malformed). Default:
// HeaderKey("Idempotency-Key").
func WithKey(source KeySource) Option { return func(c *config) { c.key = source } }

// WithKeyRequired makes a guarded request without a key a 400
// idempotency-key-missing. Default: false: it is served unguarded, so
// adding the middleware breaks no client that sends no keys yet.
func WithKeyRequired(required bool) Option { return func(c *config) { c.required = required } }

// WithStrictKeys accepts only RFC 8941 quoted strings in a key header
// ([HeaderKey]). Default: false (a bare token spells the same key).
func WithStrictKeys(strict bool) Option { return func(c *config) { c.strict = strict } }

// WithMaxKeyLength bounds a key's length in characters (code points).
// Default: 255.
func WithMaxKeyLength(n int) Option { return func(c *config) { c.maxKeyLen = n } }

// WithScope sets the namespace a key lives in, from the request: the tenant
// or principal your authentication verified (never a header the client
// sets freely), so one client's key never replays another's response.
//
// Default: one namespace, with every guarded request bound to its
// credentials (Authorization, Cookie, the TLS client certificate and
// [WithCredentialHeaders]; an absent header counts as empty): other
// credentials get 422 idempotency-key-credentials-mismatch. A scope hook
// replaces that binding, so a client whose token or cookies changed
// between retries still gets its replay. docs/http.md explains.
func WithScope(scope func(r *http.Request) string) Option { return func(c *config) { c.scope = scope } }

// WithCredentialHeaders binds requests to these headers too when no scope
// hook is set (X-Api-Key, a gateway's user header); they are never
// recorded nor replayed. Repeated calls add up. [New] refuses a name that
// is not a header name, and this option with [WithScope]. Default: none.
func WithCredentialHeaders(names ...string) Option {
	return func(c *config) {
		for _, n := range names {
			c.credentialHeaders = append(c.credentialHeaders, http.CanonicalHeaderKey(strings.TrimSpace(n)))
		}
		c.credentialHeadersSet = true
	}
}

// WithRoute sets the route that goes into the fingerprint. Default: the
// path as the client sent it, escapes kept, never the mux pattern: a
// pattern covers requests that must never replay each other's response.
func WithRoute(route func(r *http.Request) string) Option { return func(c *config) { c.route = route } }

// WithOperation names a request's operation for hooks and telemetry (see
// middleware.Operation); it must have few distinct values. Default: the
// ServeMux pattern that matched, behind its method ("POST /orders/{id}"),
// or "" around the whole mux; gin's and echo's matched route in those
// adapters.
func WithOperation(operation func(r *http.Request) string) Option {
	return func(c *config) { c.operation = operation }
}

// WithFingerprint replaces the request fingerprint. Default:
// fingerprint.HTTP.
func WithFingerprint(f func(r *http.Request, route string, body []byte) fingerprint.Fingerprint) Option {
	return func(c *config) { c.fingerprint = f }
}

// WithMaxBodyBytes bounds the request body read (and buffered for the
// handler); beyond it, 413. Default: 1 MiB.
func WithMaxBodyBytes(n int64) Option { return func(c *config) { c.maxBody = n } }

// WithMaxResponseBytes bounds the response body kept for replay (a larger
// one is recorded not replayable) and held until the handler's
// transaction commits (past it, the transaction is rolled back: 500
// transaction-response-too-large). Default: 1 MiB.
func WithMaxResponseBytes(n int) Option { return func(c *config) { c.maxResponse = n } }

// WithReplayHeaders sets the response headers a replay repeats. Default:
// [DefaultReplayHeaders]. Credentials, Date and hop-by-hop headers are
// never recorded; Content-Encoding, Vary and Cache-Control always are (a
// replay in a coding the retry does not accept is a 409
// response-not-replayable).
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

// WithStorePolicy sets which outcomes are recorded. Default:
// StorePolicy{Success: true, Redirection: true, ClientError: true}: 5xx,
// panics and answers that ask to try again are forgotten. All true records
// everything, as Stripe does.
func WithStorePolicy(p StorePolicy) Option { return func(c *config) { c.policy = p } }

// WithWaitForResult makes a duplicate of a running request wait (up to the
// guard's wait budget) for its response; false answers 409 at once.
// Default: true.
func WithWaitForResult(wait bool) Option { return func(c *config) { c.wait = wait } }

// WithFailOpen lets requests through unguarded when the backend fails
// transiently (middleware.FailOpen); other failures, and a record that
// cannot be read, are still 503. Default: false (fail closed).
func WithFailOpen(open bool) Option { return func(c *config) { c.failOpen = open } }

// WithRecordTTL sets how long this middleware's outcomes are kept (see
// middleware.RecordTTL), at least 1 ms. Default: 0, the guard's.
func WithRecordTTL(d time.Duration) Option { return func(c *config) { c.recordTTL = d } }

// WithRetryAfter sets the Retry-After of 409 (in progress) and 503
// answers. Default: 1 s.
func WithRetryAfter(d time.Duration) Option { return func(c *config) { c.retryAfter = d } }

// WithProblemTypeBase sets the prefix of problem "type" URIs, such as your
// error documentation's URL. Default: "urn:idemkit:problem:".
func WithProblemTypeBase(base string) Option { return func(c *config) { c.problemBase = base } }

// WithProblemWriter sets how the answers the middleware writes itself are
// written, in the application's own error format. Cache-Control: no-store
// and Retry-After are set before it is called; it should answer with
// p.Status, by which clients decide whether to retry. Default:
// [WriteProblem]; nil restores it.
func WithProblemWriter(write func(w http.ResponseWriter, r *http.Request, p Problem)) Option {
	return func(c *config) { c.problemWriter = write }
}

// WithLogger sets the logger for handler panics. Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// validate returns why the methods or credential headers are wrong; it
// drops duplicate credential headers and keeps them all out of replays.
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
		delete(c.replayHeaders, n)
	}
	c.credentialHeaders = names
	return "", true
}

// validGuard refuses a nil or zero middleware.Guard, which would fail on
// the first request rather than here.
func validGuard(guard *middleware.Guard) (string, bool) {
	switch {
	case guard == nil:
		return "a guard is required; make one with middleware.New", false
	case reflect.ValueOf(guard).Elem().IsZero():
		return "the guard is a zero middleware.Guard; make it with middleware.New", false
	}
	return "", true
}
