package connectinterceptor

import (
	"context"
	"crypto/rand"
	"errors"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/idemkit/idemkit"
)

// client is the client interceptor.
type client struct{ cfg clientConfig }

// NewClient validates the options and returns a connect.Interceptor for
// clients (connect.WithInterceptors) that gives every call of a unary
// procedure not declared NO_SIDE_EFFECTS or IDEMPOTENT an Idempotency-Key
// (unless the caller set one) and, with [WithMaxAttempts], retries it with
// that same key. A bad or nil option is an InvalidArgument error.
func NewClient(opts ...ClientOption) (connect.Interceptor, error) {
	bad := func(detail string) (connect.Interceptor, error) {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "connectinterceptor", detail, nil)
	}
	cfg := clientConfig{newKey: rand.Text, maxAttempts: 1, backoff: idemkit.Backoff{Base: 100 * time.Millisecond, Max: 5 * time.Second}}
	for _, o := range opts {
		if o == nil {
			return bad("an option is nil; remove it, or pass the option it was meant to be")
		}
		o(&cfg)
	}
	switch {
	case cfg.newKey == nil:
		return bad("the key function must not be nil")
	case cfg.maxAttempts < 1:
		return bad("the attempts must be at least 1")
	case !cfg.backoff.Valid():
		return bad("the back-off needs 0 < Base <= Max")
	}
	return &client{cfg: cfg}, nil
}

// WrapUnary gives the call a key and retries it (see [NewClient]).
func (c *client) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		if !spec.IsClient || spec.IdempotencyLevel == connect.IdempotencyNoSideEffects || spec.IdempotencyLevel == connect.IdempotencyIdempotent {
			return next(ctx, req)
		}
		if req.Header().Get(headerKey) == "" {
			req.Header().Set(headerKey, c.cfg.newKey())
		}
		for attempt := 1; ; attempt++ {
			resp, err := next(ctx, req)
			if err == nil || attempt >= c.cfg.maxAttempts {
				return resp, err
			}
			wait, again := c.retryable(err, attempt)
			if !again {
				return resp, err
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return resp, err
			case <-t.C:
			}
		}
	}
}

// retryable reports whether a failed attempt is retried with the same key,
// and after how long: Unavailable and ResourceExhausted, and Aborted when
// the server says the first call with the key is in progress; never
// sooner than a RetryInfo delay, and not at all when that is past the
// back-off's Max.
func (c *client) retryable(err error, attempt int) (time.Duration, bool) {
	ce := new(connect.Error)
	if !errors.As(err, &ce) {
		return 0, false
	}
	var inProgress bool
	wait := c.cfg.backoff.Delay(attempt)
	for _, d := range ce.Details() {
		switch v, _ := d.Value(); v := v.(type) {
		case *errdetails.ErrorInfo:
			inProgress = v.GetReason() == "IDEMPOTENCY_KEY_IN_PROGRESS"
		case *errdetails.RetryInfo:
			if ri := v.GetRetryDelay(); ri.CheckValid() == nil {
				if ri.AsDuration() > c.cfg.backoff.Max {
					return 0, false
				}
				wait = max(wait, ri.AsDuration())
			}
		}
	}
	switch ce.Code() {
	case connect.CodeUnavailable, connect.CodeResourceExhausted:
		return wait, true
	case connect.CodeAborted:
		return wait, inProgress
	}
	return 0, false
}

// WrapStreamingClient leaves client streams alone.
func (c *client) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler leaves handlers alone.
func (c *client) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
