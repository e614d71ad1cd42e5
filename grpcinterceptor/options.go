package grpcinterceptor

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Defaults of the interceptors (each written on its option too).
const (
	defaultMetadataKey      = "idempotency-key"
	defaultMaxKeyLength     = 255
	defaultMaxResponseBytes = 1 << 20 // 1 MiB
	defaultRetryDelay       = time.Second
	defaultErrorDomain      = "idemkit.dev"
	defaultMaxAttempts      = 1
	defaultBaseDelay        = 100 * time.Millisecond
	defaultMaxDelay         = 5 * time.Second
)

// credentialsMetadataKey is bound when no scope hook is set.
const credentialsMetadataKey = "authorization"

// replayedMetadataKey marks a replay (see [Replayed]).
const replayedMetadataKey = "idempotent-replayed"

// StorePolicy says which outcomes the server interceptor records; the rest
// are delivered once and forgotten (a retry runs the handler again).
type StorePolicy struct {
	// Forget holds the status codes that are delivered and not recorded.
	Forget []codes.Code
	// TryAgain records, when Forget does not list its code, a status
	// with a google.rpc.RetryInfo detail; recorded, the retry it asks for
	// could never succeed.
	TryAgain bool
	// Panic records a handler panic (answered Internal) when true.
	Panic bool
}

// codeSet is a set of gRPC status codes.
type codeSet uint32

func codesOf(cs []codes.Code) codeSet {
	var s codeSet
	for _, c := range cs {
		if c < 32 {
			s |= 1 << c
		}
	}
	return s
}

func (s codeSet) has(c codes.Code) bool { return c < 32 && s&(1<<c) != 0 }

// Option configures the server interceptor ([New]), the client interceptor
// ([NewClientInterceptor]) or both, as its doc says; an interceptor refuses
// an option of the other one.
type Option func(*config)

type config struct {
	client    bool   // configuring the client interceptor
	misplaced string // why the first refused option is refused

	// Both interceptors.
	key      string
	keyField protoreflect.Name // "": none
	selector func(fullMethod string) bool
	domain   string

	// The server interceptor.
	include      []string
	exclude      []string
	required     bool
	maxKeyLen    int
	scope        func(ctx context.Context) string
	fingerprint  func(fullMethod string, req any) (fingerprint.Fingerprint, error)
	maxResponse  int
	keepMetadata func(key string) bool
	policy       StorePolicy
	wait         bool
	failOpen     bool
	recordTTL    time.Duration // with recordTTLSet
	recordTTLSet bool
	retryDelay   time.Duration
	types        protoregistry.MessageTypeResolver
	logger       *slog.Logger

	credentialMD    []string // WithCredentialMetadata's (with credentialMDSet)
	credentialMDSet bool

	// The client interceptor.
	newKey      func() string
	maxAttempts int
	backoff     idemkit.Backoff
}

func defaults(client bool) config {
	return config{
		client:      client,
		key:         defaultMetadataKey,
		domain:      defaultErrorDomain,
		maxKeyLen:   defaultMaxKeyLength,
		fingerprint: protoFingerprint,
		maxResponse: defaultMaxResponseBytes,
		policy: StorePolicy{Forget: []codes.Code{
			codes.Unavailable, codes.Internal, codes.Unknown, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted,
			codes.Aborted, codes.Unauthenticated,
		}},
		wait:        true,
		retryDelay:  defaultRetryDelay,
		types:       protoregistry.GlobalTypes,
		newKey:      newUUID,
		maxAttempts: defaultMaxAttempts,
		backoff:     idemkit.Backoff{Base: defaultBaseDelay, Max: defaultMaxDelay},
	}
}

// serverOnly is an option of the server interceptor alone.
func serverOnly(name string, set func(*config)) Option {
	return func(c *config) {
		if c.client {
			c.refuse(name + " applies to the server interceptor only")
			return
		}
		set(c)
	}
}

// clientOnly is an option of the client interceptor alone.
func clientOnly(name string, set func(*config)) Option {
	return func(c *config) {
		if !c.client {
			c.refuse(name + " applies to the client interceptor only")
			return
		}
		set(c)
	}
}

// apply applies opts to c; a nil one is refused.
func (c *config) apply(opts []Option) {
	for _, o := range opts {
		if o == nil {
			c.refuse("an option is nil; remove it, or pass the option it was meant to be")
			continue
		}
		o(c)
	}
}

func (c *config) refuse(detail string) {
	if c.misplaced == "" {
		c.misplaced = detail
	}
}

// WithMetadataKey sets the metadata key that carries the idempotency key.
// Both interceptors. Default: "idempotency-key".
func WithMetadataKey(key string) Option {
	return func(c *config) { c.key = strings.ToLower(key) }
}

// WithKeyField names a string field of the request messages that carries
// the key (its proto name, such as "request_id"). Both interceptors.
// Default: none.
//
// The server takes a set field as the key, checked as a metadata key is,
// without reading the metadata: the field is the same in every retry the
// application makes, where a metadata key may be made afresh per call. An
// empty field falls back to the metadata; a method whose request has no
// such singular string field is served as without the option.
//
// The client fills an empty field (when the caller set no metadata key)
// with a fresh key, in place, so every attempt and every resend of the
// message carries it: a message shared by goroutines must have it set
// before. Give the option to both ends.
func WithKeyField(name string) Option {
	return func(c *config) { c.keyField = protoreflect.Name(name) }
}

// WithSelector sets which unary methods, by full method name
// ("/package.Service/Method"), are guarded (server) or get a key and
// retries (client). Both interceptors. Default: every method except those
// declared idempotency_level IDEMPOTENT or NO_SIDE_EFFECTS in
// protoregistry.GlobalFiles and gRPC's health, reflection and channelz
// services. [WithInclude] and [WithExclude] adjust it on the server.
func WithSelector(s func(fullMethod string) bool) Option { return func(c *config) { c.selector = s } }

// WithErrorDomain sets the google.rpc.ErrorInfo domain of the statuses the
// server answers itself and whose in-progress reason the client retries.
// Both interceptors. Default: "idemkit.dev".
func WithErrorDomain(domain string) Option { return func(c *config) { c.domain = domain } }

// WithInclude guards the methods named whatever the selector says. Server
// only; repeated calls add up. Default: none.
func WithInclude(fullMethods ...string) Option {
	return serverOnly("WithInclude", func(c *config) { c.include = append(c.include, fullMethods...) })
}

// WithExclude passes the methods named through unguarded, whatever the
// selector and [WithInclude] say. Server only; repeated calls add up.
// Default: none.
func WithExclude(fullMethods ...string) Option {
	return serverOnly("WithExclude", func(c *config) { c.exclude = append(c.exclude, fullMethods...) })
}

// WithKeyRequired makes a call to a guarded method without a key an
// InvalidArgument (IDEMPOTENCY_KEY_MISSING). Server only. Default: false:
// it is served unguarded, as over HTTP, so adding the interceptor breaks
// no client that sends no keys yet.
func WithKeyRequired(required bool) Option {
	return serverOnly("WithKeyRequired", func(c *config) { c.required = required })
}

// WithMaxKeyLength bounds a key's length in characters. Server only.
// Default: 255.
func WithMaxKeyLength(n int) Option {
	return serverOnly("WithMaxKeyLength", func(c *config) { c.maxKeyLen = n })
}

// WithScope sets the principal a key belongs to, from the call's context
// (a verified token or the peer's certificate), so one client's key never
// replays another's answer. Server only.
//
// Default: one principal, with every guarded call bound to its
// credentials ("authorization" metadata, the TLS client certificate and
// [WithCredentialMetadata]): other credentials get FailedPrecondition
// (IDEMPOTENCY_KEY_CREDENTIALS_MISMATCH). A scope hook replaces that
// binding, so a refreshed token still replays.
func WithScope(scope func(ctx context.Context) string) Option {
	return serverOnly("WithScope", func(c *config) { c.scope = scope })
}

// WithCredentialMetadata binds calls to these metadata keys too when no
// scope hook is set ("x-api-key"); they are never recorded nor replayed.
// Repeated calls add up. [New] refuses a key that cannot name text
// metadata, and this option with [WithScope]. Server only. Default: none.
func WithCredentialMetadata(keys ...string) Option {
	return serverOnly("WithCredentialMetadata", func(c *config) {
		for _, k := range keys {
			c.credentialMD = append(c.credentialMD, strings.ToLower(strings.TrimSpace(k)))
		}
		c.credentialMDSet = true
	})
}

// WithFingerprint replaces the request fingerprint; an error answers
// Internal without running the call. Server only. Default: "grpc-v1", the
// SHA-256 of the full method name and the request's deterministic
// protobuf encoding (unknown fields kept).
func WithFingerprint(f func(fullMethod string, req any) (fingerprint.Fingerprint, error)) Option {
	return serverOnly("WithFingerprint", func(c *config) { c.fingerprint = f })
}

// WithMaxResponseBytes bounds the encoded outcome kept for replay: a
// larger one is recorded not replayable, or, when the handler began its
// transaction, rolled back (IDEMPOTENCY_RESPONSE_TOO_LARGE). Server only.
// Default: 1 MiB.
func WithMaxResponseBytes(n int) Option {
	return serverOnly("WithMaxResponseBytes", func(c *config) { c.maxResponse = n })
}

// WithReplayMetadata selects the header and trailer metadata keys that are
// recorded and replayed; "grpc-" keys, pseudo-headers and credentials
// never are. Server only. Default: every other key the handler set.
func WithReplayMetadata(keep func(key string) bool) Option {
	return serverOnly("WithReplayMetadata", func(c *config) { c.keepMetadata = keep })
}

// WithStorePolicy sets which outcomes are recorded. Server only. Default:
// Unavailable, Internal, Unknown, DeadlineExceeded, Canceled,
// ResourceExhausted, Aborted, Unauthenticated, any status with RetryInfo
// and panics are forgotten. StorePolicy{TryAgain: true, Panic: true}
// records everything, as Stripe does.
func WithStorePolicy(p StorePolicy) Option {
	return serverOnly("WithStorePolicy", func(c *config) { c.policy = p })
}

// WithWaitForResult makes a duplicate of a running call wait (up to the
// guard's wait budget) for its response; false answers Aborted at once.
// Server only. Default: true.
func WithWaitForResult(wait bool) Option {
	return serverOnly("WithWaitForResult", func(c *config) { c.wait = wait })
}

// WithFailOpen lets calls through unguarded when the backend fails
// transiently (middleware.FailOpen); other failures, and a record that
// cannot be read, are still Unavailable. Server only. Default: false.
func WithFailOpen(open bool) Option {
	return serverOnly("WithFailOpen", func(c *config) { c.failOpen = open })
}

// WithRecordTTL sets how long this interceptor's outcomes are kept (see
// middleware.RecordTTL), at least 1 ms. Server only. Default: the
// guard's.
func WithRecordTTL(d time.Duration) Option {
	return serverOnly("WithRecordTTL", func(c *config) { c.recordTTL, c.recordTTLSet = d, true })
}

// WithRetryDelay sets the RetryInfo delay of the in-progress and
// unavailable statuses; zero leaves it out. Server only. Default: 1 s.
func WithRetryDelay(d time.Duration) Option {
	return serverOnly("WithRetryDelay", func(c *config) { c.retryDelay = d })
}

// WithMessageTypes sets the registry that rebuilds a recorded response
// message on replay. Server only. Default: protoregistry.GlobalTypes.
func WithMessageTypes(types protoregistry.MessageTypeResolver) Option {
	return serverOnly("WithMessageTypes", func(c *config) { c.types = types })
}

// WithLogger sets the logger for handler panics and unreadable records.
// Server only. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return serverOnly("WithLogger", func(c *config) { c.logger = l })
}

// WithNewKey sets how a fresh key is made for a call without one, as
// nethttp.Transport.NewKey does. Client only. Default: a random (version
// 4) UUID from crypto/rand.
func WithNewKey(newKey func() string) Option {
	return clientOnly("WithNewKey", func(c *config) { c.newKey = newKey })
}

// WithMaxAttempts bounds the client's attempts per call, all with the same
// key: it retries Unavailable, ResourceExhausted and in-progress Aborted
// with [WithBackoff], waiting at least a RetryInfo delay and never past
// the call's context. Client only. Default: 1 (no retries of its own).
func WithMaxAttempts(n int) Option {
	return clientOnly("WithMaxAttempts", func(c *config) { c.maxAttempts = n })
}

// WithBackoff sets the back-off between the client's attempts; Max also
// bounds the RetryInfo delay it waits (a longer one ends the retries).
// Client only. Default: 100 ms doubling up to 5 s.
func WithBackoff(b idemkit.Backoff) Option {
	return clientOnly("WithBackoff", func(c *config) { c.backoff = b })
}

// validMetadataKey reports whether k can name text metadata that gRPC
// does not reserve.
func validMetadataKey(k string) bool {
	if k == "" || strings.HasPrefix(k, "grpc-") || strings.HasSuffix(k, "-bin") || k == replayedMetadataKey {
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
