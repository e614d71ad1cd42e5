package connectinterceptor

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/idemkit/idemkit"
)

// client is the client interceptor.
type client struct{ cfg config }

// NewClient validates the options and returns a connect.Interceptor for
// clients (connect.WithInterceptors) that gives every call of a selected
// unary procedure (see [WithSelector]) a fresh key, unless the caller set
// one, in the Idempotency-Key header or the request's key field
// ([WithKeyField]) and, with [WithMaxAttempts], retries it with that same
// key. A bad or nil option, or an option of the server interceptor, is an
// InvalidArgument error.
func NewClient(opts ...Option) (connect.Interceptor, error) {
	bad := func(detail string) (connect.Interceptor, error) {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "connectinterceptor", detail, nil)
	}
	cfg := newConfig(true, opts)
	switch {
	case cfg.misplaced != "":
		return bad(cfg.misplaced)
	case cfg.keyField != "" && !cfg.keyField.IsValid():
		return bad("the key field must be the name of a field, such as request_id")
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
		if !spec.IsClient || !c.cfg.selected(spec) {
			return next(ctx, req)
		}
		if req.Header().Get(headerKey) == "" {
			c.setKey(req)
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

// setKey gives a call whose caller set no Idempotency-Key header its key:
// the request's key field carries it (filled when empty), or a fresh
// header does.
func (c *client) setKey(req connect.AnyRequest) {
	if msg, ok := req.Any().(proto.Message); ok && c.cfg.keyField != "" {
		if m := msg.ProtoReflect(); m.IsValid() {
			if fd := m.Descriptor().Fields().ByName(c.cfg.keyField); fd != nil && fd.Kind() == protoreflect.StringKind && !fd.IsList() {
				if m.Get(fd).String() == "" {
					m.Set(fd, protoreflect.ValueOfString(c.cfg.newKey()))
				}
				return
			}
		}
	}
	req.Header().Set(headerKey, c.cfg.newKey())
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
			inProgress = v.GetReason() == "IDEMPOTENCY_KEY_IN_PROGRESS" && v.GetDomain() == c.cfg.domain
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
