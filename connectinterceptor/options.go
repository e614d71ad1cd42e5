package connectinterceptor

import (
	"context"
	"log/slog"
	"time"

	"connectrpc.com/connect"

	"github.com/idemkit/idemkit"
)

// Defaults of the interceptors (each written on its option too).
const (
	headerKey               = "Idempotency-Key"
	replayedHeader          = "Idempotent-Replayed"
	defaultMaxKeyLength     = 255
	defaultMaxResponseBytes = 1 << 20 // 1 MiB
	defaultRetryDelay       = time.Second
	errorDomain             = "idemkit.dev"
)

// Option configures the server interceptor ([New]).
type Option func(*config)

type config struct {
	required    bool
	keyField    string
	scope       func(ctx context.Context, req connect.AnyRequest) string
	maxResponse int
	policy      StorePolicy
	wait        bool
	failOpen    bool
	retryDelay  time.Duration
	logger      *slog.Logger
}

// WithKeyRequired makes a call to a guarded procedure without a key an
// InvalidArgument (IDEMPOTENCY_KEY_MISSING). Default: false: it is served
// unguarded, so adding the interceptor breaks no client that sends no
// keys yet.
func WithKeyRequired(required bool) Option { return func(c *config) { c.required = required } }

// WithKeyField names a string field of the request messages that carries
// the key (its proto name, such as "request_id"); a set field is the key,
// an empty one falls back to the header. Default: none, the
// Idempotency-Key header only.
func WithKeyField(name string) Option { return func(c *config) { c.keyField = name } }

// WithScope sets the principal a key belongs to (a verified token, the
// peer), so one client's key never replays another's answer. Default: one
// principal, with every guarded call bound to its Authorization header:
// other credentials get FailedPrecondition
// (IDEMPOTENCY_KEY_CREDENTIALS_MISMATCH). A scope hook replaces that
// binding, so a refreshed token still replays.
func WithScope(scope func(ctx context.Context, req connect.AnyRequest) string) Option {
	return func(c *config) { c.scope = scope }
}

// WithMaxResponseBytes bounds the encoded outcome kept for replay; a
// larger one is recorded not replayable. Default: 1 MiB.
func WithMaxResponseBytes(n int) Option { return func(c *config) { c.maxResponse = n } }

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

// WithStorePolicy sets which outcomes are recorded. Default: Unavailable,
// Internal, Unknown, DeadlineExceeded, Canceled, ResourceExhausted,
// Aborted, Unauthenticated, any error with RetryInfo and panics are
// forgotten. StorePolicy{TryAgain: true, Panic: true} records everything,
// as Stripe does.
func WithStorePolicy(p StorePolicy) Option { return func(c *config) { c.policy = p } }

// WithWaitForResult makes a duplicate of a running call wait (up to the
// guard's wait budget) for its answer; false answers Aborted at once.
// Default: true.
func WithWaitForResult(wait bool) Option { return func(c *config) { c.wait = wait } }

// WithFailOpen lets calls through unguarded when the backend fails
// transiently (middleware.FailOpen). Default: false.
func WithFailOpen(open bool) Option { return func(c *config) { c.failOpen = open } }

// WithRetryDelay sets the RetryInfo delay of the in-progress and
// unavailable errors; zero leaves it out. Default: 1 s.
func WithRetryDelay(d time.Duration) Option { return func(c *config) { c.retryDelay = d } }

// WithLogger sets the logger for handler panics and unreadable records.
// Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// ClientOption configures the client interceptor ([NewClient]).
type ClientOption func(*clientConfig)

type clientConfig struct {
	newKey      func() string
	maxAttempts int
	backoff     idemkit.Backoff
}

// WithNewKey sets how a fresh key is made for a call without one.
// Default: crypto/rand.Text, 26 characters that carry 128 random bits.
func WithNewKey(newKey func() string) ClientOption {
	return func(c *clientConfig) { c.newKey = newKey }
}

// WithMaxAttempts bounds the attempts per call, all with the same key: it
// retries Unavailable, ResourceExhausted and an in-progress Aborted with
// [WithBackoff], waiting at least a RetryInfo delay and never past the
// call's context. Default: 1 (no retries of its own).
func WithMaxAttempts(n int) ClientOption { return func(c *clientConfig) { c.maxAttempts = n } }

// WithBackoff sets the back-off between attempts; Max also bounds the
// RetryInfo delay it waits (a longer one ends the retries). Default:
// 100 ms doubling up to 5 s.
func WithBackoff(b idemkit.Backoff) ClientOption { return func(c *clientConfig) { c.backoff = b } }
