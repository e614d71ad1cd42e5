package connectinterceptor

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idemkit/idemkit"
)

// Defaults of the interceptors (each written on its option too).
const (
	headerKey               = "Idempotency-Key"
	replayedHeader          = "Idempotent-Replayed"
	credentialsHeader       = "Authorization"
	defaultMaxKeyLength     = 255
	defaultMaxResponseBytes = 1 << 20 // 1 MiB
	defaultRetryDelay       = time.Second
	defaultErrorDomain      = "idemkit.dev"
)

// Option configures the server interceptor ([New]), the client
// interceptor ([NewClient]) or both, as its doc says; an interceptor
// refuses an option of the other one.
type Option func(*config)

type config struct {
	client    bool   // configuring the client interceptor
	misplaced string // why the first refused option is refused

	// Both interceptors.
	keyField protoreflect.Name // "": none
	selector func(procedure string) bool
	domain   string

	// The server interceptor.
	include, exclude  []string
	required          bool
	maxKeyLen         int
	scope             func(ctx context.Context, req connect.AnyRequest) string
	credentialHeaders []string // WithCredentialHeaders's (with credentialsSet), canonical
	credentialsSet    bool
	types             protoregistry.MessageTypeResolver
	maxResponse       int
	policy            StorePolicy
	recordTTL         time.Duration // with recordTTLSet
	recordTTLSet      bool
	wait, failOpen    bool
	retryDelay        time.Duration
	logger            *slog.Logger

	// The client interceptor.
	newKey      func() string
	maxAttempts int
	backoff     idemkit.Backoff
}

// newConfig applies opts over the defaults of one interceptor.
func newConfig(client bool, opts []Option) config {
	c := config{
		client:      client,
		domain:      defaultErrorDomain,
		maxKeyLen:   defaultMaxKeyLength,
		maxResponse: defaultMaxResponseBytes,
		wait:        true,
		retryDelay:  defaultRetryDelay,
		types:       protoregistry.GlobalTypes,
		policy: StorePolicy{Forget: []connect.Code{
			connect.CodeUnavailable, connect.CodeInternal, connect.CodeUnknown, connect.CodeDeadlineExceeded,
			connect.CodeCanceled, connect.CodeResourceExhausted, connect.CodeAborted, connect.CodeUnauthenticated,
		}},
		newKey:      rand.Text,
		maxAttempts: 1,
		backoff:     idemkit.Backoff{Base: 100 * time.Millisecond, Max: 5 * time.Second},
	}
	for _, o := range opts {
		if o == nil {
			c.refuse("an option is nil; remove it, or pass the option it was meant to be")
			continue
		}
		o(&c)
	}
	return c
}

func (c *config) refuse(detail string) {
	if c.misplaced == "" {
		c.misplaced = detail
	}
}

// of is an option of one interceptor only: the client's when client is
// set, the server's otherwise.
func of(client bool, name string, set func(*config)) Option {
	return func(c *config) {
		switch {
		case c.client == client:
			set(c)
		case client:
			c.refuse(name + " applies to the client interceptor only")
		default:
			c.refuse(name + " applies to the server interceptor only")
		}
	}
}

// selected reports whether a unary procedure is guarded (server) or gets
// a key and retries (client): [WithExclude] wins, then [WithInclude],
// then the selector.
func (c *config) selected(spec connect.Spec) bool {
	switch {
	case slices.Contains(c.exclude, spec.Procedure):
		return false
	case slices.Contains(c.include, spec.Procedure):
		return true
	case c.selector != nil:
		return c.selector(spec.Procedure)
	}
	return spec.IdempotencyLevel != connect.IdempotencyNoSideEffects && spec.IdempotencyLevel != connect.IdempotencyIdempotent &&
		!strings.HasPrefix(spec.Procedure, "/grpc.health.v1.") && !strings.HasPrefix(spec.Procedure, "/grpc.reflection.")
}

// WithKeyField names a string field of the request messages that carries
// the key (its proto name, such as "request_id"). Both interceptors.
// Default: none, the Idempotency-Key header only.
//
// The server takes a set field as the key, checked as a header key is
// (a malformed one is refused with a google.rpc.BadRequest naming the
// field), without reading the header: the field is the same in every
// retry the application makes, where a header may be made afresh per
// call. An empty field falls back to the header; a procedure whose
// request has no such singular string field is served as without the
// option.
//
// The client fills an empty field (when the caller set no Idempotency-Key
// header) with a fresh key, in place, so every attempt and every resend of
// the message carries it: a message shared by goroutines must have it set
// before. Give the option to both ends.
func WithKeyField(name string) Option {
	return func(c *config) { c.keyField = protoreflect.Name(name) }
}

// WithSelector sets which unary procedures, by name
// ("/package.Service/Method"), are guarded (server) or get a key and
// retries (client). Both interceptors. Default: every procedure except
// those declared NO_SIDE_EFFECTS or IDEMPOTENT (connect.WithIdempotency,
// or the schema) and gRPC's health and reflection services. [WithInclude]
// and [WithExclude] adjust it on the server.
func WithSelector(selector func(procedure string) bool) Option {
	return func(c *config) { c.selector = selector }
}

// WithErrorDomain sets the google.rpc.ErrorInfo domain of the errors the
// server answers itself and whose in-progress reason the client retries.
// Both interceptors. Default: "idemkit.dev".
func WithErrorDomain(domain string) Option { return func(c *config) { c.domain = domain } }

// WithInclude guards the procedures named whatever the selector says.
// Server only; repeated calls add up. Default: none.
func WithInclude(procedures ...string) Option {
	return of(false, "WithInclude", func(c *config) { c.include = append(c.include, procedures...) })
}

// WithExclude passes the procedures named through unguarded, whatever the
// selector and [WithInclude] say. Server only; repeated calls add up.
// Default: none.
func WithExclude(procedures ...string) Option {
	return of(false, "WithExclude", func(c *config) { c.exclude = append(c.exclude, procedures...) })
}

// WithKeyRequired makes a call to a guarded procedure without a key an
// InvalidArgument (IDEMPOTENCY_KEY_MISSING). Server only. Default: false:
// it is served unguarded, so adding the interceptor breaks no client that
// sends no keys yet.
func WithKeyRequired(required bool) Option {
	return of(false, "WithKeyRequired", func(c *config) { c.required = required })
}

// WithMaxKeyLength bounds a key's length in characters. Server only.
// Default: 255.
func WithMaxKeyLength(n int) Option {
	return of(false, "WithMaxKeyLength", func(c *config) { c.maxKeyLen = n })
}

// WithScope sets the principal a key belongs to (a verified token, the
// peer), so one client's key never replays another's answer. Server only.
//
// Default: one principal, with every guarded call bound to its
// Authorization header and the headers [WithCredentialHeaders] names:
// other credentials get FailedPrecondition
// (IDEMPOTENCY_KEY_CREDENTIALS_MISMATCH). A scope hook replaces that
// binding, so a refreshed token still replays.
func WithScope(scope func(ctx context.Context, req connect.AnyRequest) string) Option {
	return of(false, "WithScope", func(c *config) { c.scope = scope })
}

// WithCredentialHeaders binds calls to these request headers too when no
// scope hook is set ("X-Api-Key"); they are never recorded nor replayed.
// Repeated calls add up. [New] refuses a name that is no header field
// name, and this option with [WithScope]. Server only. Default: none.
func WithCredentialHeaders(names ...string) Option {
	return of(false, "WithCredentialHeaders", func(c *config) {
		c.credentialHeaders = append(c.credentialHeaders, names...)
		c.credentialsSet = true
	})
}

// WithMaxResponseBytes bounds the encoded outcome kept for replay: a
// larger one is recorded not replayable, or, when the handler began its
// transaction, rolled back (IDEMPOTENCY_RESPONSE_TOO_LARGE). Server only.
// Default: 1 MiB.
func WithMaxResponseBytes(n int) Option {
	return of(false, "WithMaxResponseBytes", func(c *config) { c.maxResponse = n })
}

// StorePolicy says which outcomes the server interceptor records; the rest
// are delivered once and forgotten (a retry runs the handler again).
type StorePolicy struct {
	// Forget holds the codes of errors that are delivered and not
	// recorded.
	Forget []connect.Code
	// TryAgain records, when Forget does not list its code, an error
	// with a google.rpc.RetryInfo detail; recorded, the retry it asks for
	// could never succeed.
	TryAgain bool
	// Panic records a handler panic (answered Internal) when true.
	Panic bool
}

// WithStorePolicy sets which outcomes are recorded. Server only. Default:
// Unavailable, Internal, Unknown, DeadlineExceeded, Canceled,
// ResourceExhausted, Aborted, Unauthenticated, any error with RetryInfo
// and panics are forgotten. StorePolicy{TryAgain: true, Panic: true}
// records everything, as Stripe does.
func WithStorePolicy(p StorePolicy) Option {
	return of(false, "WithStorePolicy", func(c *config) { c.policy = p })
}

// WithWaitForResult makes a duplicate of a running call wait (up to the
// guard's wait budget) for its answer; false answers Aborted at once.
// Server only. Default: true.
func WithWaitForResult(wait bool) Option {
	return of(false, "WithWaitForResult", func(c *config) { c.wait = wait })
}

// WithFailOpen lets calls through unguarded when the backend fails
// transiently (middleware.FailOpen); a record that cannot be read is
// still Unavailable. Server only. Default: false.
func WithFailOpen(open bool) Option {
	return of(false, "WithFailOpen", func(c *config) { c.failOpen = open })
}

// WithRecordTTL sets how long this interceptor's outcomes are kept (see
// middleware.RecordTTL), at least 1 ms. Server only. Default: the
// guard's.
func WithRecordTTL(d time.Duration) Option {
	return of(false, "WithRecordTTL", func(c *config) { c.recordTTL, c.recordTTLSet = d, true })
}

// WithRetryDelay sets the RetryInfo delay of the in-progress and
// unavailable errors; zero leaves it out. Server only. Default: 1 s.
func WithRetryDelay(d time.Duration) Option {
	return of(false, "WithRetryDelay", func(c *config) { c.retryDelay = d })
}

// WithMessageTypes sets the registry that rebuilds a recorded response
// message on replay; a response whose type it lacks is recorded not
// replayable. Server only. Default: protoregistry.GlobalTypes.
func WithMessageTypes(types protoregistry.MessageTypeResolver) Option {
	return of(false, "WithMessageTypes", func(c *config) { c.types = types })
}

// WithLogger sets the logger for handler panics and unreadable records.
// Server only. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return of(false, "WithLogger", func(c *config) { c.logger = l })
}

// WithNewKey sets how a fresh key is made for a call without one. Client
// only. Default: crypto/rand.Text, 26 characters that carry 128 random
// bits.
func WithNewKey(newKey func() string) Option {
	return of(true, "WithNewKey", func(c *config) { c.newKey = newKey })
}

// WithMaxAttempts bounds the attempts per call, all with the same key: it
// retries Unavailable, ResourceExhausted and an in-progress Aborted with
// [WithBackoff], waiting at least a RetryInfo delay and never past the
// call's context. Client only. Default: 1 (no retries of its own).
func WithMaxAttempts(n int) Option {
	return of(true, "WithMaxAttempts", func(c *config) { c.maxAttempts = n })
}

// WithBackoff sets the back-off between attempts; Max also bounds the
// RetryInfo delay it waits (a longer one ends the retries). Client only.
// Default: 100 ms doubling up to 5 s.
func WithBackoff(b idemkit.Backoff) Option {
	return of(true, "WithBackoff", func(c *config) { c.backoff = b })
}

// checkCredentialHeaders returns why the WithCredentialHeaders names are
// wrong; it canonicalizes them and drops duplicates and Authorization
// (always bound).
func (c *config) checkCredentialHeaders() string {
	if !c.credentialsSet {
		return ""
	}
	switch {
	case c.scope != nil:
		return "WithCredentialHeaders binds calls only without a scope hook, and WithScope is set: " +
			"drop WithCredentialHeaders, or make the scope hook name the principal those headers identify"
	case len(c.credentialHeaders) == 0:
		return `WithCredentialHeaders needs at least one header name, such as "X-Api-Key"`
	}
	var names []string
	for _, n := range c.credentialHeaders {
		name := http.CanonicalHeaderKey(strings.TrimSpace(n))
		if !validHeaderName(name) || name == headerKey || name == replayedHeader || reserved(name) {
			return "WithCredentialHeaders: " + strconv.Quote(n) + ` is not a header a client sends credentials in, such as "X-Api-Key"`
		}
		if name != credentialsHeader && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	c.credentialHeaders = names
	return ""
}

// validHeaderName reports whether name is an HTTP field name (a token).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0) {
			return false
		}
	}
	return true
}
