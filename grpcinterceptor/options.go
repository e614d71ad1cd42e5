package grpcinterceptor

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/idemkit/idemkit/fingerprint"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Defaults of the interceptors.
const (
	// DefaultMetadataKey is the metadata key that carries the idempotency
	// key.
	DefaultMetadataKey = "idempotency-key"
	// ReplayedMetadataKey is set to "true" in the header metadata of a
	// replayed response.
	ReplayedMetadataKey = "idempotent-replayed"
	// DefaultMaxKeyLength bounds a key's length in characters.
	DefaultMaxKeyLength = 255
	// DefaultMaxResponseBytes bounds the encoded response (message or
	// status, with its metadata) kept for replay.
	DefaultMaxResponseBytes = 1 << 20 // 1 MiB
	// DefaultRetryDelay is the RetryInfo delay of the in-progress and
	// unavailable statuses.
	DefaultRetryDelay = time.Second
	// DefaultErrorDomain is the google.rpc.ErrorInfo domain of the
	// statuses the interceptor answers itself.
	DefaultErrorDomain = "idemkit.dev"
)

// CodeSet is a set of gRPC status codes (the 17 canonical ones).
type CodeSet uint32

// Codes returns the set of the codes given.
func Codes(cs ...codes.Code) CodeSet {
	var s CodeSet
	for _, c := range cs {
		if c < 32 {
			s |= 1 << c
		}
	}
	return s
}

// Has reports whether c is in the set.
func (s CodeSet) Has(c codes.Code) bool { return c < 32 && s&(1<<c) != 0 }

// StorePolicy says which outcomes are recorded. What is not recorded is
// delivered once and forgotten: the claim is released and a retry runs the
// handler again.
type StorePolicy struct {
	// Forget holds the status codes that are delivered and not recorded.
	Forget CodeSet
	// Panic records a handler panic (answered Internal) when true.
	Panic bool
}

// DefaultStorePolicy records OK and the business errors, and forgets the
// transient ones (Unavailable, Internal, Unknown, DeadlineExceeded,
// Canceled, ResourceExhausted) and panics, so a retry can run again.
var DefaultStorePolicy = StorePolicy{
	Forget: Codes(codes.Unavailable, codes.Internal, codes.Unknown, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted),
}

// RecordAllStorePolicy records every outcome, transient errors and panics
// included, as Stripe's API does: a retry always gets the first answer.
var RecordAllStorePolicy = StorePolicy{Panic: true}

func (p StorePolicy) stores(c codes.Code) bool { return !p.Forget.Has(c) }

// Option configures the server interceptor ([New]).
type Option func(*serverConfig)

type serverConfig struct {
	key          string
	selector     Selector
	include      []string
	exclude      []string
	required     bool
	methodScope  bool
	maxKeyLen    int
	scope        func(ctx context.Context) string
	fingerprint  func(fullMethod string, req any) (fingerprint.Fingerprint, error)
	maxResponse  int
	keepMetadata func(key string) bool
	policy       StorePolicy
	wait         bool
	failOpen     bool
	retryDelay   time.Duration
	domain       string
	types        protoregistry.MessageTypeResolver
	logger       *slog.Logger
}

func serverDefaults() serverConfig {
	return serverConfig{
		key:         DefaultMetadataKey,
		required:    true,
		methodScope: true,
		maxKeyLen:   DefaultMaxKeyLength,
		fingerprint: Fingerprint,
		maxResponse: DefaultMaxResponseBytes,
		policy:      DefaultStorePolicy,
		wait:        true,
		retryDelay:  DefaultRetryDelay,
		domain:      DefaultErrorDomain,
		types:       protoregistry.GlobalTypes,
	}
}

// WithMetadataKey sets the metadata key that carries the idempotency key
// (case-insensitive, as metadata keys are). Default: "idempotency-key".
func WithMetadataKey(key string) Option {
	return func(c *serverConfig) { c.key = strings.ToLower(key) }
}

// WithSelector sets which unary methods are guarded; others pass through.
// Default: DefaultSelector(nil), every method except those declared with
// idempotency_level IDEMPOTENT or NO_SIDE_EFFECTS in
// protoregistry.GlobalFiles and those of gRPC's health, reflection and
// channelz services. [WithInclude] and [WithExclude] adjust
// whichever selector is in force.
func WithSelector(s Selector) Option { return func(c *serverConfig) { c.selector = s } }

// WithInclude guards the methods named ("/package.Service/Method") whatever
// the selector says. Default: none. Repeated calls add up.
func WithInclude(fullMethods ...string) Option {
	return func(c *serverConfig) { c.include = append(c.include, fullMethods...) }
}

// WithExclude passes the methods named ("/package.Service/Method") through
// unguarded whatever the selector and [WithInclude] say. Default: none.
// Repeated calls add up.
func WithExclude(fullMethods ...string) Option {
	return func(c *serverConfig) { c.exclude = append(c.exclude, fullMethods...) }
}

// WithKeyRequired makes a call to a guarded method without a key an
// InvalidArgument (IDEMPOTENCY_KEY_MISSING). Set it to false to let such
// calls through unguarded while clients are being taught to send keys.
// Default: true.
func WithKeyRequired(required bool) Option {
	return func(c *serverConfig) { c.required = required }
}

// WithMaxKeyLength bounds a key's length in characters. Default: 255.
func WithMaxKeyLength(n int) Option { return func(c *serverConfig) { c.maxKeyLen = n } }

// WithScope sets the principal a key belongs to, from the call's context:
// typically the authenticated user or tenant (from the peer's certificate
// or a token in the metadata), so one client's key can never replay
// another client's response. Default: one principal for the whole service.
func WithScope(scope func(ctx context.Context) string) Option {
	return func(c *serverConfig) { c.scope = scope }
}

// WithMethodScope puts each method's keys in a namespace of their own
// (true), so the same key sent to two methods names two calls. With false,
// every method of the service shares one namespace per principal, and a
// key reused with another method is refused (FailedPrecondition,
// IDEMPOTENCY_KEY_REUSED: the full method name is part of the
// fingerprint), as the HTTP adapters refuse a key reused on another route.
// Default: true.
func WithMethodScope(perMethod bool) Option {
	return func(c *serverConfig) { c.methodScope = perMethod }
}

// WithFingerprint replaces the request fingerprint. Default: [Fingerprint]
// ("grpc-v1": the full method name and the request's deterministic
// protobuf encoding). An error answers the call Internal without running
// it.
func WithFingerprint(f func(fullMethod string, req any) (fingerprint.Fingerprint, error)) Option {
	return func(c *serverConfig) { c.fingerprint = f }
}

// WithMaxResponseBytes bounds the encoded outcome (the response message or
// the error status, with the recorded metadata) kept for replay. A larger
// one is delivered and recorded as executed-not-replayable: retries get
// FailedPrecondition (IDEMPOTENCY_NOT_REPLAYABLE) and the handler never runs again
// under that key. Default: 1 MiB.
func WithMaxResponseBytes(n int) Option {
	return func(c *serverConfig) { c.maxResponse = n }
}

// WithReplayMetadata selects the header and trailer metadata keys (lower
// case) that are recorded and repeated by a replay. Keys starting with
// "grpc-", pseudo-headers and "idempotent-replayed" are never recorded.
// Default: every other key the handler set.
func WithReplayMetadata(keep func(key string) bool) Option {
	return func(c *serverConfig) { c.keepMetadata = keep }
}

// WithStorePolicy sets which outcomes are recorded. Default:
// [DefaultStorePolicy]; [RecordAllStorePolicy] records everything.
func WithStorePolicy(p StorePolicy) Option { return func(c *serverConfig) { c.policy = p } }

// WithWaitForResult makes a duplicate of a running call wait (up to the
// guard's wait budget) and then get its response. Set it to false to answer
// such duplicates Aborted (IDEMPOTENCY_KEY_IN_PROGRESS) at once. Default:
// true.
func WithWaitForResult(wait bool) Option { return func(c *serverConfig) { c.wait = wait } }

// WithFailOpen lets calls through unguarded when the idempotency backend
// is unreachable. Default: false (fail closed: Unavailable with RetryInfo,
// so a call is never run without knowing whether it already ran).
func WithFailOpen(open bool) Option { return func(c *serverConfig) { c.failOpen = open } }

// WithRetryDelay sets the RetryInfo delay of the in-progress and
// unavailable statuses. Zero leaves RetryInfo out. Default: 1 s.
func WithRetryDelay(d time.Duration) Option {
	return func(c *serverConfig) { c.retryDelay = d }
}

// WithErrorDomain sets the google.rpc.ErrorInfo domain of the statuses the
// interceptor answers itself. Default: "idemkit.dev".
func WithErrorDomain(domain string) Option { return func(c *serverConfig) { c.domain = domain } }

// WithMessageTypes sets the registry that rebuilds a recorded response
// message from its full name on replay. Default: protoregistry.GlobalTypes,
// where every generated message type registers itself.
func WithMessageTypes(types protoregistry.MessageTypeResolver) Option {
	return func(c *serverConfig) { c.types = types }
}

// WithLogger sets the logger for handler panics and unreadable records.
// Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *serverConfig) { c.logger = l } }

// validMetadataKey reports whether k can name a metadata entry that
// carries a text key: lower-case [0-9a-z-_.], not reserved by gRPC ("grpc-")
// and not binary ("-bin").
func validMetadataKey(k string) bool {
	if k == "" || strings.HasPrefix(k, "grpc-") || strings.HasSuffix(k, "-bin") || k == ReplayedMetadataKey {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
