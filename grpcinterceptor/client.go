package grpcinterceptor

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/idemkit/idemkit"
)

// client is the client interceptor.
type client struct {
	cfg config
}

// NewClientInterceptor validates the options and returns the client side:
// a unary client interceptor that gives every call to a selected method
// without a key a fresh one before the first attempt, so that its own
// retries and grpc-go's all carry it, and no retry can run the call twice
// on a server guarded by [New]. A bad or nil option is an InvalidArgument
// error.
func NewClientInterceptor(opts ...Option) (grpc.UnaryClientInterceptor, error) {
	cfg := defaults(true)
	cfg.apply(opts)
	bad := func(detail string) (grpc.UnaryClientInterceptor, error) {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "grpcinterceptor", detail, nil)
	}
	switch {
	case cfg.misplaced != "":
		return bad(cfg.misplaced)
	case !validMetadataKey(cfg.key):
		return bad("the key metadata name must be 1 or more of [0-9a-z-_.], not binary (-bin) and not reserved (grpc-)")
	case cfg.keyField != "" && !cfg.keyField.IsValid():
		return bad("the key field must be the name of a field, such as request_id")
	case cfg.newKey == nil:
		return bad("the key function must not be nil")
	case cfg.maxAttempts < 1:
		return bad("the maximum attempts must be at least 1")
	case !cfg.backoff.Valid():
		return bad("the back-off delays must be positive, the maximum at least the base")
	}
	if cfg.selector == nil {
		cfg.selector = defaultSelector(nil)
	}
	return (&client{cfg: cfg}).intercept, nil
}

// intercept is the grpc.UnaryClientInterceptor.
func (c *client) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !c.cfg.selector(method) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if len(metadata.ValueFromOutgoingContext(ctx, c.cfg.key)) == 0 {
		// The caller set no key in the metadata: the request's key field
		// carries it (filled when empty), or a fresh metadata key does.
		if m, field := keyFieldOf(c.cfg.keyField, req); field != nil {
			if m.Get(field).String() == "" {
				m.Set(field, protoreflect.ValueOfString(c.cfg.newKey()))
			}
		} else {
			ctx = metadata.AppendToOutgoingContext(ctx, c.cfg.key, c.cfg.newKey())
		}
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
		if ei := ErrorInfoOf(err); ei == nil || ei.GetReason() != reasonInProgress || ei.GetDomain() != c.cfg.domain {
			return 0, false // an Aborted of the application's own
		}
	default:
		return 0, false
	}
	wait := c.cfg.backoff.Delay(attempt)
	if ri, ok := retryDelayOf(err); ok {
		if ri > c.cfg.backoff.Max {
			return 0, false
		}
		wait = max(wait, ri)
	}
	return wait, true
}

// Replayed reports whether header (from grpc.Header) marks the answer as a
// replay of a recorded one.
func Replayed(header metadata.MD) bool {
	v := header.Get(replayedMetadataKey)
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
