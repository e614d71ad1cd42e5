package grpcinterceptor

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
)

// Defaults of the client interceptor.
const (
	// DefaultMaxAttempts is the default number of attempts per call, the
	// first included: 1, so the interceptor only attaches keys and leaves
	// retrying to grpc-go's retry policy unless [WithMaxAttempts] says
	// otherwise.
	DefaultMaxAttempts = 1
	// DefaultBaseDelay is the default first back-off delay between the
	// client interceptor's attempts (the Base of its [idemkit.Backoff]).
	DefaultBaseDelay = 100 * time.Millisecond
	// DefaultMaxDelay is the default cap of one back-off delay (the Max of
	// its [idemkit.Backoff]).
	DefaultMaxDelay = 5 * time.Second
)

// ClientOption configures the client interceptor.
type ClientOption func(*clientConfig)

type clientConfig struct {
	key         string
	selector    Selector
	newKey      func() string
	maxAttempts int
	backoff     idemkit.Backoff
	domain      string
}

// WithClientMetadataKey sets the metadata key the client interceptor
// attaches the idempotency key under (case-insensitive). Default:
// "idempotency-key".
func WithClientMetadataKey(key string) ClientOption {
	return func(c *clientConfig) { c.key = strings.ToLower(key) }
}

// WithClientSelector sets which methods get a key (and the interceptor's
// retries); others are invoked unchanged. Default: DefaultSelector(nil),
// every method except those declared IDEMPOTENT or NO_SIDE_EFFECTS and
// those of gRPC's health, reflection and channelz services.
func WithClientSelector(s Selector) ClientOption { return func(c *clientConfig) { c.selector = s } }

// WithKeyFunc sets how a fresh key is made for a call without one.
// Default: a random (version 4) UUID from crypto/rand.
func WithKeyFunc(newKey func() string) ClientOption {
	return func(c *clientConfig) { c.newKey = newKey }
}

// WithMaxAttempts bounds the attempts the interceptor makes per call, the
// first included, all with the same key. It retries Unavailable,
// ResourceExhausted and Aborted with the in-progress reason
// (IDEMPOTENCY_KEY_IN_PROGRESS), with capped exponential back-off and
// jitter ([WithBackoff]), waiting at least a RetryInfo delay the server sends (one longer
// than the maximum delay ends the retries) and never past the call's
// context. Default: 1 (no retries by the interceptor; grpc-go's own retry
// policy, if the service config has one, still resends the key).
func WithMaxAttempts(n int) ClientOption { return func(c *clientConfig) { c.maxAttempts = n } }

// WithBackoff sets the back-off between attempts (see [idemkit.Backoff]:
// the n-th delay is drawn from [d/2, d] for d = Base·2^(n−1), capped by
// Max). Max also bounds the RetryInfo delay the interceptor waits: a longer
// one ends the retries. Default: [DefaultBaseDelay] (100 ms) doubling up to
// [DefaultMaxDelay] (5 s).
func WithBackoff(b idemkit.Backoff) ClientOption {
	return func(c *clientConfig) { c.backoff = b }
}

// WithClientErrorDomain sets the google.rpc.ErrorInfo domain whose
// in-progress reason the interceptor retries. Default: "idemkit.dev".
func WithClientErrorDomain(domain string) ClientOption {
	return func(c *clientConfig) { c.domain = domain }
}

// client is the client interceptor.
type client struct {
	cfg clientConfig
}

// NewClientInterceptor validates the options and returns the client side
// of idempotency, a unary client interceptor for
// grpc.WithChainUnaryInterceptor: it gives every call to a selected method
// that lacks a key a fresh one, and keeps it for every attempt of that
// call — its own retries and those of grpc-go's retry policy alike (the
// key is in the outgoing metadata before the first attempt, so every
// attempt carries it). Because every attempt carries the same key, a retry
// can never run the call twice on a server guarded by [New]'s interceptor.
// A bad option is an InvalidArgument [idemkit.Error]; nothing panics on a
// call.
func NewClientInterceptor(opts ...ClientOption) (grpc.UnaryClientInterceptor, error) {
	cfg := clientConfig{
		key: DefaultMetadataKey, newKey: newUUID, maxAttempts: DefaultMaxAttempts,
		backoff: idemkit.Backoff{Base: DefaultBaseDelay, Max: DefaultMaxDelay}, domain: DefaultErrorDomain,
	}
	for _, o := range opts {
		o(&cfg)
	}
	bad := func(detail string) (grpc.UnaryClientInterceptor, error) {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "grpcinterceptor", detail, nil)
	}
	switch {
	case !validMetadataKey(cfg.key):
		return bad("the key metadata name must be 1 or more of [0-9a-z-_.], not binary (-bin) and not reserved (grpc-)")
	case cfg.newKey == nil:
		return bad("the key function must not be nil")
	case cfg.maxAttempts < 1:
		return bad("the maximum attempts must be at least 1")
	case !cfg.backoff.Valid():
		return bad("the back-off delays must be positive, the maximum at least the base")
	}
	if cfg.selector == nil {
		cfg.selector = DefaultSelector(nil)
	}
	return (&client{cfg: cfg}).intercept, nil
}

// intercept is the grpc.UnaryClientInterceptor.
func (c *client) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !c.cfg.selector(method) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if len(metadata.ValueFromOutgoingContext(ctx, c.cfg.key)) == 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, c.cfg.key, c.cfg.newKey())
	}
	for attempt := 1; ; attempt++ {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil || attempt >= c.cfg.maxAttempts || ctx.Err() != nil {
			return err
		}
		wait, ok := c.retryable(err, attempt)
		if !ok {
			return err
		}
		if deadline, has := ctx.Deadline(); has && time.Until(deadline) <= wait {
			// The call's deadline comes before the next attempt could
			// start: the last attempt's error says more than
			// DeadlineExceeded would.
			return err
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return status.FromContextError(ctx.Err()).Err()
		case <-timer.C:
		}
	}
}

// retryable decides whether a failed attempt may be retried with the same
// key, and after how long.
func (c *client) retryable(err error, attempt int) (time.Duration, bool) {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted:
	case codes.Aborted:
		if ei := ErrorInfoOf(err); ei == nil || ei.GetReason() != ReasonInProgress || ei.GetDomain() != c.cfg.domain {
			return 0, false // an Aborted of the application's own
		}
	default:
		return 0, false
	}
	wait := c.cfg.backoff.Delay(attempt)
	if ri, ok := RetryDelayOf(err); ok {
		if ri > c.cfg.backoff.Max {
			return 0, false
		}
		wait = max(wait, ri)
	}
	return wait, true
}

// Replayed reports whether header, the header metadata of a call (from
// grpc.Header), marks its answer as a replay of a recorded one.
func Replayed(header metadata.MD) bool {
	v := header.Get(ReplayedMetadataKey)
	return len(v) == 1 && v[0] == "true"
}

// newUUID returns a random (version 4) UUID in its canonical text form.
func newUUID() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
