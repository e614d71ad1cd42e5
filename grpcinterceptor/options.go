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

// credentialsMetadataKey is the metadata a call is bound to when no scope
// hook is set (see [WithScope]).
const credentialsMetadataKey = "authorization"

// replayedMetadataKey is set to "true" in the header metadata of a
// replayed response (see [Replayed]).
const replayedMetadataKey = "idempotent-replayed"

// StorePolicy says which outcomes the server interceptor records. What is
// not recorded is delivered once and forgotten: the claim is released and a
// retry runs the handler again. See [WithStorePolicy] for the default.
type StorePolicy struct {
	// Forget holds the status codes that are delivered and not recorded.
	Forget []codes.Code
	// TryAgain records, when Forget does not list its code, an error
	// status that carries a google.rpc.RetryInfo detail: the server asks
	// the client to call again after a delay. When false, such a status
	// is delivered and forgotten whatever its code: recorded, it would
	// answer every retry with the same key until the record expires, and
	// the retry it asks for could never succeed.
	TryAgain bool
	// Panic records a handler panic (answered Internal) when true.
	Panic bool
}

// codeSet is a set of gRPC status codes (the 17 canonical ones).
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
// ([NewClientInterceptor]) or both, as its doc says, so that one list of
// options can configure both ends of a service. An interceptor refuses an
// option that applies only to the other one (InvalidArgument).
type Option func(*config)

type config struct {
	client    bool   // configuring the client interceptor
	misplaced string // why the first refused option is refused: nil, or given to the wrong interceptor

	// Both interceptors.
	key      string
	keyField protoreflect.Name // "": none
	selector Selector
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

	credentialMD    []string // the metadata keys WithCredentialMetadata names (with credentialMDSet)
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

// WithMetadataKey sets the metadata key that carries the idempotency key
// (case-insensitive, as metadata keys are): the one the server reads and
// the client attaches. Both interceptors. Default: "idempotency-key".
func WithMetadataKey(key string) Option {
	return func(c *config) { c.key = strings.ToLower(key) }
}

// WithKeyField names a string field of the request messages that carries
// the idempotency key, as APIs that declare a request_id field do (the
// field's proto name, such as "request_id"; "" names none). Both
// interceptors. Default: none (the key travels in the metadata only).
//
// The server reads the key from the field of a request whose message has a
// singular string field of that name; when the field is set (not empty),
// it is the key, and the metadata key is not read at all; when it is
// empty, the key comes from the metadata, as without this option. The
// field wins because it is part of the request the application built: it
// stays the same across all the application's own retries, where a
// metadata key may be made afresh for every call by a client interceptor
// that does not know the field. The field's value is checked as a metadata
// key is (1 to [WithMaxKeyLength] visible ASCII characters other than ','):
// a bad one is InvalidArgument (IDEMPOTENCY_KEY_MALFORMED, with a
// google.rpc.BadRequest naming the field). For a method whose request
// message has no such field, or has one that is not a singular string (a
// number, a repeated field, a message), the field is not a key source and
// the metadata is the only one: one option can serve a service whose
// methods declare the field and others that do not.
//
// The client fills the field of a selected call's request, when it is
// empty and the caller set no metadata key, with a fresh key
// ([WithKeyFunc]), and adds no metadata key; a request whose field is set
// is sent as it is, also without metadata. Its message is changed in
// place, as client libraries that fill request ids do: every attempt, and
// every later call that sends the same message again, carries the same
// key, so retrying a call by resending its message can never run it twice.
// A message shared by goroutines that send it at once must therefore have
// its field set before. A request without such a field gets a metadata key
// as without this option. Give the option to both ends: a server without it
// does not see the key in the field.
func WithKeyField(name string) Option {
	return func(c *config) { c.keyField = protoreflect.Name(name) }
}

// WithSelector sets which unary methods are guarded (server) or get a key
// and the interceptor's retries (client); others pass through. Both
// interceptors. Default: every method except those declared with
// idempotency_level IDEMPOTENT or NO_SIDE_EFFECTS in
// protoregistry.GlobalFiles and those of gRPC's health, reflection and
// channelz services. On the server, [WithInclude] and [WithExclude] adjust
// whichever selector is in force.
func WithSelector(s Selector) Option { return func(c *config) { c.selector = s } }

// WithErrorDomain sets the google.rpc.ErrorInfo domain of the statuses the
// server interceptor answers itself, and the domain whose in-progress
// reason the client interceptor retries. Both interceptors. Default:
// "idemkit.dev".
func WithErrorDomain(domain string) Option { return func(c *config) { c.domain = domain } }

// WithInclude guards the methods named ("/package.Service/Method") whatever
// the selector says. Server only. Default: none. Repeated calls add up.
func WithInclude(fullMethods ...string) Option {
	return serverOnly("WithInclude", func(c *config) { c.include = append(c.include, fullMethods...) })
}

// WithExclude passes the methods named ("/package.Service/Method") through
// unguarded whatever the selector and [WithInclude] say. Server only.
// Default: none. Repeated calls add up.
func WithExclude(fullMethods ...string) Option {
	return serverOnly("WithExclude", func(c *config) { c.exclude = append(c.exclude, fullMethods...) })
}

// WithKeyRequired makes a call to a guarded method without a key an
// InvalidArgument (IDEMPOTENCY_KEY_MISSING) that names the metadata (and
// the [WithKeyField] field) to send; nothing runs. Server only. Default:
// false: such a call is served unguarded (it runs every time, nothing is
// recorded), as the HTTP adapters serve a request without a key, so adding
// the interceptor to a service whose clients send no keys yet breaks none
// of them. Require keys once every client sends them (the client
// interceptor, [NewClientInterceptor], gives every call one).
func WithKeyRequired(required bool) Option {
	return serverOnly("WithKeyRequired", func(c *config) { c.required = required })
}

// WithMaxKeyLength bounds a key's length in characters. Server only.
// Default: 255.
func WithMaxKeyLength(n int) Option {
	return serverOnly("WithMaxKeyLength", func(c *config) { c.maxKeyLen = n })
}

// WithScope sets the principal a key belongs to, from the call's context:
// typically the authenticated user or tenant (from the peer's certificate
// or a verified token in the metadata), so one client's key can never
// replay another client's response. Server only.
//
// Default: one principal for the whole service, with every guarded call
// bound to its credentials: all values of its "authorization" metadata, in
// order (absent metadata counts as empty), the client certificate its TLS
// connection presented (mutual TLS: the leaf of credentials.TLSInfo's
// peer certificates), and the metadata named by [WithCredentialMetadata];
// a call with none of them is bound to having none. A call whose
// credentials differ from those of the call that recorded the key is
// refused with FailedPrecondition (IDEMPOTENCY_KEY_CREDENTIALS_MISMATCH):
// never another caller's answer, never a second execution. The guard
// stores only a keyed hash of them (see middleware.Credentials and
// middleware.WithSecret). A scope hook replaces that binding: it names the
// real principal, so a client whose token was refreshed between its
// retries still gets its replay; use one when tokens are short-lived.
func WithScope(scope func(ctx context.Context) string) Option {
	return serverOnly("WithScope", func(c *config) { c.scope = scope })
}

// WithCredentialMetadata binds calls to the metadata keys named too
// (case-insensitive, as metadata keys are), besides "authorization" and
// the client certificate, when no scope hook is set (see [WithScope]): the
// metadata that identifies a caller in your API, such as "x-api-key" or
// the user an authenticating proxy sets. A call whose values differ from
// those of the call that recorded the key is refused with
// FailedPrecondition (IDEMPOTENCY_KEY_CREDENTIALS_MISMATCH), as for
// "authorization". This metadata is never recorded nor replayed, whatever
// [WithReplayMetadata] says. Repeated calls add up. [New] refuses a key
// that cannot name text metadata, and this option together with WithScope
// (the scope replaces the binding). Server only. Default: none.
func WithCredentialMetadata(keys ...string) Option {
	return serverOnly("WithCredentialMetadata", func(c *config) {
		for _, k := range keys {
			c.credentialMD = append(c.credentialMD, strings.ToLower(strings.TrimSpace(k)))
		}
		c.credentialMDSet = true
	})
}

// WithFingerprint replaces the request fingerprint. An error answers the
// call Internal without running it. Server only. Default: "grpc-v1", the
// SHA-256 of the full method name (length-prefixed) and the request's
// deterministic protobuf encoding (proto.MarshalOptions{Deterministic:
// true}: map entries sorted); unknown fields are kept, so a request
// carrying fields this server does not know still matches its faithful
// retries, and a request that is not a protobuf message is an error.
func WithFingerprint(f func(fullMethod string, req any) (fingerprint.Fingerprint, error)) Option {
	return serverOnly("WithFingerprint", func(c *config) { c.fingerprint = f })
}

// WithMaxResponseBytes bounds the encoded outcome (the response message or
// the error status, with the recorded metadata) kept for replay. A larger
// one is delivered and recorded as executed-not-replayable: retries get
// FailedPrecondition (IDEMPOTENCY_NOT_REPLAYABLE) and the handler never runs again
// under that key. In the transactional mode (the handler began its
// transaction, pgstore.Tx) a response message larger than the bound is
// rolled back instead, as over HTTP: the call gets Internal
// (IDEMPOTENCY_RESPONSE_TOO_LARGE). Server only. Default: 1 MiB.
func WithMaxResponseBytes(n int) Option {
	return serverOnly("WithMaxResponseBytes", func(c *config) { c.maxResponse = n })
}

// WithReplayMetadata selects the header and trailer metadata keys (lower
// case) that are recorded and repeated by a replay. Keys starting with
// "grpc-", pseudo-headers, "idempotent-replayed" and credentials
// ("authorization", "proxy-authorization", "cookie", "set-cookie") are
// never recorded nor replayed.
// Server only. Default: every other key the handler set.
func WithReplayMetadata(keep func(key string) bool) Option {
	return serverOnly("WithReplayMetadata", func(c *config) { c.keepMetadata = keep })
}

// WithStorePolicy sets which outcomes are recorded. Server only. Default:
// OK and the business errors are recorded; the transient errors
// (Unavailable, Internal, Unknown, DeadlineExceeded, Canceled,
// ResourceExhausted), the answers that ask the client to call again
// (Aborted: retry the sequence; Unauthenticated: call with credentials;
// any status with a RetryInfo detail, see StorePolicy.TryAgain) and
// panics are forgotten, so a retry can run again and succeed.
// StorePolicy{TryAgain: true, Panic: true} records every outcome, as
// Stripe's API does: a retry always gets the first answer.
func WithStorePolicy(p StorePolicy) Option {
	return serverOnly("WithStorePolicy", func(c *config) { c.policy = p })
}

// WithWaitForResult makes a duplicate of a running call wait (up to the
// guard's wait budget) and then get its response. Set it to false to answer
// such duplicates Aborted (IDEMPOTENCY_KEY_IN_PROGRESS) at once. Server
// only. Default: true.
func WithWaitForResult(wait bool) Option {
	return serverOnly("WithWaitForResult", func(c *config) { c.wait = wait })
}

// WithFailOpen lets calls through unguarded when the idempotency backend
// is unreachable: when it fails in a way that may pass (it cannot be
// reached, does not answer in time, or refuses for load:
// idemkit.Code.Transient). Other failures are still answered Unavailable,
// and a record that exists but cannot be read (sealed with a key this
// server lacks, or damaged) is answered Unavailable
// (IDEMPOTENCY_RECORD_UNREADABLE) and never run again. Server only.
// Default: false (fail closed: Unavailable with RetryInfo, so a call is
// never run without knowing whether it already ran).
func WithFailOpen(open bool) Option {
	return serverOnly("WithFailOpen", func(c *config) { c.failOpen = open })
}

// WithRecordTTL sets how long the outcomes of the calls this interceptor
// guards are kept for replay (see middleware.RecordTTL): a retry after it
// runs the call again. It must be at least 1 ms. Server only. Default: the
// guard's record TTL (middleware.WithRecordTTL, 24 h unless set there).
func WithRecordTTL(d time.Duration) Option {
	return serverOnly("WithRecordTTL", func(c *config) { c.recordTTL, c.recordTTLSet = d, true })
}

// WithRetryDelay sets the RetryInfo delay of the in-progress and
// unavailable statuses. Zero leaves RetryInfo out. Server only. Default:
// 1 s.
func WithRetryDelay(d time.Duration) Option {
	return serverOnly("WithRetryDelay", func(c *config) { c.retryDelay = d })
}

// WithMessageTypes sets the registry that rebuilds a recorded response
// message from its full name on replay. Server only. Default:
// protoregistry.GlobalTypes, where every generated message type registers
// itself.
func WithMessageTypes(types protoregistry.MessageTypeResolver) Option {
	return serverOnly("WithMessageTypes", func(c *config) { c.types = types })
}

// WithLogger sets the logger for handler panics and unreadable records.
// Server only. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return serverOnly("WithLogger", func(c *config) { c.logger = l })
}

// WithKeyFunc sets how a fresh key is made for a call without one. Client
// only. Default: a random (version 4) UUID from crypto/rand.
func WithKeyFunc(newKey func() string) Option {
	return clientOnly("WithKeyFunc", func(c *config) { c.newKey = newKey })
}

// WithMaxAttempts bounds the attempts the client interceptor makes per
// call, the first included, all with the same key. It retries Unavailable,
// ResourceExhausted and Aborted with the in-progress reason
// (IDEMPOTENCY_KEY_IN_PROGRESS), with capped exponential back-off and
// jitter ([WithBackoff]), waiting at least a RetryInfo delay the server
// sends (one longer than the maximum delay ends the retries) and never past
// the call's context. Client only. Default: 1 (no retries by the
// interceptor; grpc-go's own retry policy, if the service config has one,
// still resends the key).
func WithMaxAttempts(n int) Option {
	return clientOnly("WithMaxAttempts", func(c *config) { c.maxAttempts = n })
}

// WithBackoff sets the back-off between the client interceptor's attempts
// (see [idemkit.Backoff]: the n-th delay is drawn from [d/2, d] for d =
// Base·2^(n−1), capped by Max). Max also bounds the RetryInfo delay the
// interceptor waits: a longer one ends the retries. Client only. Default:
// 100 ms doubling up to 5 s.
func WithBackoff(b idemkit.Backoff) Option {
	return clientOnly("WithBackoff", func(c *config) { c.backoff = b })
}

// validMetadataKey reports whether k can name a metadata entry that
// carries a text key: lower-case [0-9a-z-_.], not reserved by gRPC ("grpc-")
// and not binary ("-bin").
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
