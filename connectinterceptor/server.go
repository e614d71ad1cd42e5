package connectinterceptor

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"reflect"
	"runtime/debug"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
)

// server is the server interceptor.
type server struct {
	guard    *middleware.Guard
	cfg      config
	forget   map[connect.Code]bool   // the store policy's Forget
	callOpts []middleware.CallOption // those of every call
}

// New validates the options and returns a connect.Interceptor for
// handlers (connect.WithInterceptors) that makes the unary procedures it
// guards idempotent with guard; docs/grpc.md has its answers. A bad or nil
// option, an option of the client interceptor, or a guard not made by
// middleware.New, is an InvalidArgument error.
func New(guard *middleware.Guard, opts ...Option) (connect.Interceptor, error) {
	bad := func(detail string) (connect.Interceptor, error) {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "connectinterceptor", detail, nil)
	}
	if guard == nil || reflect.ValueOf(guard).Elem().IsZero() {
		return bad("a guard is required; make one with middleware.New")
	}
	cfg := newConfig(false, opts)
	why := cfg.checkCredentialHeaders()
	switch {
	case cfg.misplaced != "":
		return bad(cfg.misplaced)
	case why != "":
		return bad(why)
	case cfg.keyField != "" && !cfg.keyField.IsValid():
		return bad("the key field must be the name of a field, such as request_id")
	case cfg.maxKeyLen < 1:
		return bad("the maximum key length must be positive")
	case cfg.maxResponse < 1:
		return bad("the response capture limit must be positive")
	case cfg.retryDelay < 0:
		return bad("the retry delay must not be negative")
	case cfg.recordTTLSet && cfg.recordTTL < time.Millisecond:
		return bad("the record TTL must be at least 1ms")
	case cfg.domain == "":
		return bad(`the error domain must not be empty; the default is "idemkit.dev"`)
	case cfg.types == nil:
		return bad("the message types must not be nil; the default is protoregistry.GlobalTypes")
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	s := &server{guard: guard, cfg: cfg, forget: make(map[connect.Code]bool, len(cfg.policy.Forget))}
	for _, c := range cfg.policy.Forget {
		s.forget[c] = true
	}
	for _, o := range []struct {
		set bool
		opt middleware.CallOption
	}{
		{!cfg.wait, middleware.WaitBudget(0)},
		{cfg.failOpen, middleware.FailOpen()},
		{cfg.recordTTLSet, middleware.RecordTTL(cfg.recordTTL)},
	} {
		if o.set {
			s.callOpts = append(s.callOpts, o.opt)
		}
	}
	return s, nil
}

// WrapUnary guards a unary procedure's handler (see [New]).
func (s *server) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req) // given to a client: nothing to guard
		}
		return s.serve(ctx, req, next)
	}
}

// WrapStreamingClient leaves client streams alone.
func (s *server) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler leaves streaming procedures unguarded: no one
// request message fixes what such a call does.
func (s *server) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// serve handles one call to a unary procedure.
func (s *server) serve(ctx context.Context, req connect.AnyRequest, next connect.UnaryFunc) (connect.AnyResponse, error) {
	spec := req.Spec()
	op := middleware.Operation(spec.Procedure)
	if !s.cfg.selected(spec) {
		s.guard.Bypass(ctx, middleware.EventPassedThrough, nil, op)
		return next(ctx, req)
	}
	msg, _ := req.Any().(proto.Message)
	key, field, why := s.key(req.Header(), msg)
	switch {
	case why != "" && field:
		return nil, s.reject(ctx, op, "IDEMPOTENCY_KEY_MALFORMED", "malformed idempotency key in "+string(s.cfg.keyField)+": "+why,
			&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{
				Field: string(s.cfg.keyField), Description: "malformed idempotency key: " + why, Reason: "IDEMPOTENCY_KEY_MALFORMED",
			}}})
	case why != "":
		return nil, s.reject(ctx, op, "IDEMPOTENCY_KEY_MALFORMED", "malformed idempotency key: "+why)
	case key == "" && !s.cfg.required:
		s.guard.Bypass(ctx, middleware.EventPassedThrough, nil, op)
		return next(ctx, req)
	case key == "":
		where := "the header " + headerKey
		if s.cfg.keyField != "" {
			where = string(s.cfg.keyField) + " or " + where
		}
		return nil, s.reject(ctx, op, "IDEMPOTENCY_KEY_MISSING", "send "+where+" with a unique key, such as a UUID")
	}
	fp, err := fingerprintOf(spec.Procedure, msg)
	if err != nil {
		s.guard.Bypass(ctx, middleware.EventRejected, err, op)
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	opts := append([]middleware.CallOption{op}, s.callOpts...)
	if s.cfg.scope != nil {
		opts = append(opts, middleware.Scope(s.cfg.scope(ctx, req)))
	} else {
		opts = append(opts, s.credentials(req.Header()))
	}
	var (
		resp            connect.AnyResponse
		callErr         error
		begun, tooLarge bool
	)
	// Connect sends nothing before the interceptors return, but it sends
	// the headers and trailers set through the call's info with any
	// error: those of a rolled-back transaction are taken back.
	info, _ := connect.CallInfoForHandlerContext(ctx)
	before := snapshot(info)
	out, err := s.guard.Execute(ctx, key, fp, func(ctx context.Context) (middleware.Result, error) {
		var (
			res       middleware.Result
			oversized bool
		)
		res, oversized, resp, callErr = s.run(ctx, req, next)
		if begun, _ = middleware.TransactionBegun(ctx); begun && oversized {
			// A commit cannot record it, and a transaction's outcome is
			// recorded or rolled back: rolled back.
			tooLarge = true
			return forget(ctx), nil
		}
		return res, nil
	}, opts...)
	if begun && (err != nil || tooLarge) {
		before.restore(info)
	}
	switch {
	case err != nil:
		return nil, s.refuse(ctx, err)
	case tooLarge:
		s.cfg.logger.ErrorContext(ctx, "connectinterceptor: the handler's response is larger than the response limit, so its transaction was rolled back",
			slog.String("procedure", spec.Procedure), slog.Int("limit", s.cfg.maxResponse))
		return nil, s.refusal(connect.CodeInternal, "IDEMPOTENCY_RESPONSE_TOO_LARGE", fmt.Sprintf(
			"the response exceeds %d bytes, the most a call's database transaction can record; the transaction was rolled back, so nothing of the call was kept", s.cfg.maxResponse), 0)
	case out.Replayed:
		return s.replay(ctx, out.Value)
	}
	return resp, callErr
}

// callMeta is a copy of the headers and trailers of a call's info.
type callMeta struct{ header, trailer http.Header }

func snapshot(info connect.CallInfo) callMeta {
	if info == nil {
		return callMeta{}
	}
	return callMeta{info.ResponseHeader().Clone(), info.ResponseTrailer().Clone()}
}

// restore puts info's headers and trailers back as they were.
func (m callMeta) restore(info connect.CallInfo) {
	if info == nil {
		return
	}
	clear(info.ResponseHeader())
	clear(info.ResponseTrailer())
	maps.Copy(info.ResponseHeader(), m.header)
	maps.Copy(info.ResponseTrailer(), m.trailer)
}

// key returns the call's key: the key field of msg when it is set (field
// is then true), else the Idempotency-Key header; why says what is wrong
// with a malformed one. The key is taken literally (gRPC metadata has no
// quoted form): 1 to the maximum key length of visible ASCII characters,
// no ',' (a list, as a joining proxy makes it), sent once.
func (s *server) key(h http.Header, msg proto.Message) (key string, field bool, why string) {
	values := h.Values(headerKey)
	if s.cfg.keyField != "" && msg != nil {
		m := msg.ProtoReflect()
		if fd := m.Descriptor().Fields().ByName(s.cfg.keyField); fd != nil && fd.Kind() == protoreflect.StringKind && !fd.IsList() && m.Has(fd) {
			values, field = []string{m.Get(fd).String()}, true
		}
	}
	if len(values) == 0 {
		return "", false, ""
	}
	if len(values) > 1 {
		return "", field, fmt.Sprintf("the key appears %d times; send it once", len(values))
	}
	key = values[0]
	if n := len(key); n == 0 || n > s.cfg.maxKeyLen {
		return "", field, fmt.Sprintf("the key has %d characters; send 1 to %d", n, s.cfg.maxKeyLen)
	}
	if i := strings.IndexFunc(key, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == ',' }); i >= 0 {
		return "", field, fmt.Sprintf("the character at position %d is not allowed in a key (only visible ASCII but ',')", i)
	}
	return key, field, ""
}

// credentials binds a call without a scope hook to its Authorization
// header and, in their order, the headers WithCredentialHeaders names
// (several values of one joined by a line feed, which a header value
// never holds).
func (s *server) credentials(h http.Header) middleware.CallOption {
	auth := h.Values(credentialsHeader)
	if len(s.cfg.credentialHeaders) == 0 {
		return middleware.Credentials(auth...)
	}
	values := []string{strings.Join(auth, "\n")}
	none := len(auth) == 0
	for _, name := range s.cfg.credentialHeaders {
		v := h.Values(name)
		none = none && len(v) == 0
		values = append(values, strings.Join(v, "\n"))
	}
	if none {
		return middleware.Credentials()
	}
	return middleware.Credentials(values...)
}

// fingerprintOf is the "connect-v1" fingerprint of a call: the SHA-256 of
// the procedure's length and name and the request's deterministic
// protobuf encoding, unknown fields kept, so a request with fields this
// server does not know still matches its faithful retries.
func fingerprintOf(procedure string, msg proto.Message) (fingerprint.Fingerprint, error) {
	if msg == nil {
		return fingerprint.Fingerprint{}, errors.New("connectinterceptor: the request is not a protobuf message, so it cannot be fingerprinted")
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return fingerprint.Fingerprint{}, fmt.Errorf("connectinterceptor: the request cannot be fingerprinted: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s", len(procedure), procedure)
	h.Write(b)
	return fingerprint.New("connect-v1", [32]byte(h.Sum(nil))), nil
}

// run calls the handler and decides what the guard records. A panic is
// answered Internal, recorded only as the store policy says.
// oversized says that the outcome was not recorded only because it is
// larger than the response limit.
func (s *server) run(ctx context.Context, req connect.AnyRequest, next connect.UnaryFunc) (res middleware.Result, oversized bool, resp connect.AnyResponse, err error) {
	info, _ := connect.CallInfoForHandlerContext(ctx)
	defer func() {
		if p := recover(); p != nil {
			s.cfg.logger.ErrorContext(ctx, "connectinterceptor: the handler panicked", slog.String("procedure", req.Spec().Procedure),
				slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			ce := connect.NewError(connect.CodeInternal, errors.New("connectinterceptor: the handler panicked"))
			resp, err = nil, ce
			res, oversized = s.verdict(ctx, info, nil, ce, s.cfg.policy.Panic)
		}
	}()
	resp, err = next(ctx, req)
	if err == nil {
		res, oversized = s.verdict(ctx, info, resp, nil, true)
		return res, oversized, resp, nil
	}
	// As connect answers it: a context error with its code, any other
	// error that is no *connect.Error as Unknown.
	ce := new(connect.Error)
	switch {
	case errors.As(err, &ce):
	case errors.Is(err, context.Canceled):
		ce = connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		ce = connect.NewError(connect.CodeDeadlineExceeded, err)
	default:
		ce = connect.NewError(connect.CodeUnknown, err)
	}
	res, oversized = s.verdict(ctx, info, nil, ce, !s.forget[ce.Code()] && (s.cfg.policy.TryAgain || !hasRetryInfo(ce)))
	return res, oversized, resp, err
}

// hasRetryInfo reports whether e carries a google.rpc.RetryInfo detail:
// the server asks the client to call again (see StorePolicy.TryAgain).
func hasRetryInfo(e *connect.Error) bool {
	for _, d := range e.Details() {
		if d.Type() == "google.rpc.RetryInfo" {
			return true
		}
	}
	return false
}

// forget is the result of an outcome that is not recorded: the claim is
// released and a retry runs the handler again.
func forget(ctx context.Context) middleware.Result {
	middleware.DoNotRecord(ctx)
	return middleware.Result{}
}

// refusal builds an error with an ErrorInfo detail in the error domain,
// a RetryInfo detail when retryAfter > 0, and details.
func (s *server) refusal(code connect.Code, reason, msg string, retryAfter time.Duration, details ...proto.Message) *connect.Error {
	e := connect.NewError(code, errors.New(msg))
	details = append([]proto.Message{&errdetails.ErrorInfo{Reason: reason, Domain: s.cfg.domain}}, details...)
	if retryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)})
	}
	for _, m := range details {
		if d, err := connect.NewErrorDetail(m); err == nil {
			e.AddDetail(d)
		}
	}
	return e
}

// reject refuses a call before it reaches the guard (InvalidArgument),
// and reports it.
func (s *server) reject(ctx context.Context, op middleware.CallOption, reason, msg string, details ...proto.Message) error {
	s.guard.Bypass(ctx, middleware.EventRejected, errors.New("connectinterceptor: "+reason+": "+msg), op)
	return s.refusal(connect.CodeInvalidArgument, reason, msg, 0, details...)
}

// refuse answers a call the guard did not run.
func (s *server) refuse(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, middleware.ErrInvalidKey):
		return s.refusal(connect.CodeInvalidArgument, "IDEMPOTENCY_KEY_MALFORMED",
			"malformed idempotency key: the key is too long for its scope; use a shorter key", 0)
	case errors.Is(err, middleware.ErrCredentialsMismatch):
		return s.refusal(connect.CodeFailedPrecondition, "IDEMPOTENCY_KEY_CREDENTIALS_MISMATCH",
			"this idempotency key was used by a call with other credentials; use a new key for a new request", 0)
	case errors.Is(err, middleware.ErrMismatch):
		return s.refusal(connect.CodeFailedPrecondition, "IDEMPOTENCY_KEY_REUSED",
			"this idempotency key was used with a different request; use a new key for a new request", 0)
	case errors.Is(err, middleware.ErrInProgress):
		return s.refusal(connect.CodeAborted, "IDEMPOTENCY_KEY_IN_PROGRESS",
			"the first call with this idempotency key has not finished; retry later with the same key and request", s.cfg.retryDelay)
	case errors.Is(err, middleware.ErrNotReplayable):
		return s.refusal(connect.CodeFailedPrecondition, "IDEMPOTENCY_NOT_REPLAYABLE",
			"the call with this idempotency key was executed, but its answer could not be kept for replay; it will not be executed again", 0)
	case errors.Is(err, store.ErrUnsealable):
		s.cfg.logger.ErrorContext(ctx, "connectinterceptor: a recorded answer cannot be opened", slog.String("error", err.Error()))
		return s.refusal(connect.CodeUnavailable, "IDEMPOTENCY_RECORD_UNREADABLE",
			"the call with this idempotency key ran, but its recorded answer is unreadable; it will not be executed again", s.cfg.retryDelay)
	case errors.Is(err, store.ErrWorkConflict):
		return s.refusal(connect.CodeAborted, "IDEMPOTENCY_TRANSACTION_CONFLICT",
			"the call's database transaction conflicted with a concurrent one and was rolled back, so nothing of it was kept; retry with the same key and request", s.cfg.retryDelay)
	case errors.Is(err, store.ErrWorkFailed):
		return s.refusal(connect.CodeInternal, "IDEMPOTENCY_TRANSACTION_FAILED",
			"the call's database transaction failed at its commit and was rolled back, so nothing of it was kept", 0)
	case errors.Is(err, middleware.ErrUnavailable) && idemkit.CodeOf(err).Permanent():
		return s.refusal(connect.CodeInternal, "IDEMPOTENCY_MISCONFIGURED",
			"the idempotency backend refuses this service until its setup is fixed, so the call was not executed", 0)
	case errors.Is(err, middleware.ErrUnavailable):
		return s.refusal(connect.CodeUnavailable, "IDEMPOTENCY_UNAVAILABLE",
			"the idempotency backend cannot answer, so the call was not executed; retry later with the same key", s.cfg.retryDelay)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	case ctx.Err() != nil:
		return connect.NewError(connect.CodeCanceled, ctx.Err())
	}
	s.cfg.logger.ErrorContext(ctx, "connectinterceptor: unexpected guard error", slog.String("error", err.Error()))
	return s.refusal(connect.CodeUnavailable, "IDEMPOTENCY_UNAVAILABLE", "the idempotency backend failed", s.cfg.retryDelay)
}
