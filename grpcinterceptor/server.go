package grpcinterceptor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
)

// server is the server interceptor.
type server struct {
	guard    *middleware.Guard
	cfg      config
	forget   codeSet // the store policy's Forget
	include  map[string]bool
	exclude  map[string]bool
	callOpts []middleware.CallOption
	keyMeta  map[string]string // the ErrorInfo metadata of the key statuses
	// fieldMeta is keyMeta with the key field (WithKeyField), for a
	// method whose request has it.
	fieldMeta map[string]string
}

// New validates the options and returns a unary server interceptor that
// makes the methods it guards idempotent with guard (docs/grpc.md has its
// answers). A bad or nil option, or a guard not made by middleware.New,
// is an InvalidArgument error.
func New(guard *middleware.Guard, opts ...Option) (grpc.UnaryServerInterceptor, error) {
	s, err := newServer(guard, opts...)
	if err != nil {
		return nil, err
	}
	return s.intercept, nil
}

func newServer(guard *middleware.Guard, opts ...Option) (*server, error) {
	bad := func(detail string) (*server, error) {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "grpcinterceptor", detail, nil)
	}
	switch {
	case guard == nil:
		return bad("a guard is required; make one with middleware.New")
	case reflect.ValueOf(guard).Elem().IsZero():
		return bad("the guard is a zero middleware.Guard; make it with middleware.New")
	}
	cfg := defaults(false)
	cfg.apply(opts)
	switch {
	case cfg.misplaced != "":
		return bad(cfg.misplaced)
	case !validMetadataKey(cfg.key):
		return bad("the key metadata name must be 1 or more of [0-9a-z-_.], not binary (-bin) and not reserved (grpc-)")
	case cfg.keyField != "" && !cfg.keyField.IsValid():
		return bad("the key field must be the name of a field, such as request_id")
	case cfg.recordTTLSet && cfg.recordTTL < time.Millisecond:
		return bad("the record TTL must be at least 1ms")
	case cfg.maxKeyLen < 1:
		return bad("the maximum key length must be positive")
	case cfg.maxResponse < 1:
		return bad("the response capture limit must be positive")
	case cfg.retryDelay < 0:
		return bad("the retry delay must not be negative")
	case cfg.domain == "":
		return bad("the error domain must not be empty")
	case cfg.fingerprint == nil || cfg.types == nil:
		return bad("the fingerprint function and the message types must not be nil")
	}
	if why, ok := cfg.validateCredentials(); !ok {
		return bad(why)
	}
	if cfg.selector == nil {
		cfg.selector = defaultSelector(nil)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	s := &server{
		guard: guard, cfg: cfg, forget: codesOf(cfg.policy.Forget),
		include: setOf(cfg.include), exclude: setOf(cfg.exclude),
		keyMeta: map[string]string{errorInfoMetadataKey: cfg.key},
	}
	if cfg.keyField != "" {
		s.fieldMeta = map[string]string{errorInfoMetadataKey: cfg.key, errorInfoFieldKey: string(cfg.keyField)}
	}
	if !cfg.wait {
		s.callOpts = append(s.callOpts, middleware.WaitBudget(0))
	}
	if cfg.failOpen {
		s.callOpts = append(s.callOpts, middleware.FailOpen())
	}
	if cfg.recordTTLSet {
		s.callOpts = append(s.callOpts, middleware.RecordTTL(cfg.recordTTL))
	}
	return s, nil
}

func setOf(names []string) map[string]bool {
	if len(names) == 0 {
		return nil
	}
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// guarded reports whether calls to fullMethod go through the guard.
func (s *server) guarded(fullMethod string) bool {
	switch {
	case s.exclude[fullMethod]:
		return false
	case s.include[fullMethod]:
		return true
	}
	return s.cfg.selector(fullMethod)
}

// intercept is the grpc.UnaryServerInterceptor.
func (s *server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	op := middleware.Operation(info.FullMethod)
	if !s.guarded(info.FullMethod) {
		s.guard.Bypass(ctx, middleware.EventPassedThrough, nil, op)
		return handler(ctx, req)
	}
	// The key: the request's key field when it is set, else the metadata.
	var key string
	m, field := keyFieldOf(s.cfg.keyField, req)
	if field != nil {
		if v := m.Get(field).String(); v != "" {
			k, err := parseKey([]string{v}, s.cfg.maxKeyLen)
			if err != nil {
				return nil, s.rejectField(ctx, op, err)
			}
			key = k
		}
	}
	if key == "" {
		values := metadata.ValueFromIncomingContext(ctx, s.cfg.key)
		if len(values) == 0 {
			if !s.cfg.required {
				s.guard.Bypass(ctx, middleware.EventPassedThrough, nil, op)
				return handler(ctx, req)
			}
			if field != nil {
				return nil, s.reject(ctx, op, reasonKeyMissing,
					"set "+string(field.Name())+" or send the metadata "+s.cfg.key+" with a unique key, such as a UUID", s.fieldMeta)
			}
			return nil, s.reject(ctx, op, reasonKeyMissing, "send the metadata "+s.cfg.key+" with a unique key, such as a UUID", s.keyMeta)
		}
		k, err := parseKey(values, s.cfg.maxKeyLen)
		if err != nil {
			var ke *keyError
			errors.As(err, &ke)
			return nil, s.reject(ctx, op, reasonKeyMalformed, "malformed idempotency key: "+ke.reason, s.keyMeta)
		}
		key = k
	}
	fp, err := s.cfg.fingerprint(info.FullMethod, req)
	if err != nil {
		s.cfg.logger.ErrorContext(ctx, "grpcinterceptor: the request cannot be fingerprinted",
			slog.String("method", info.FullMethod), slog.String("error", err.Error()))
		s.guard.Bypass(ctx, middleware.EventRejected, err, op)
		return nil, status.Error(codes.Internal, "grpcinterceptor: the request cannot be fingerprinted")
	}
	scope := ""
	if s.cfg.scope != nil {
		scope = s.cfg.scope(ctx)
	}

	var optBuf [6]middleware.CallOption
	opts := append(append(optBuf[:0], s.callOpts...), op, middleware.Scope(scope))
	if s.cfg.scope == nil {
		// Without a principal, the call's credentials stand for it.
		opts = append(opts, s.credentials(ctx))
	}

	var (
		resp       any
		handlerErr error
		held       *heldStream
		tooLarge   bool
	)
	out, err := s.guard.Execute(ctx, key, fp, func(ctx context.Context) (middleware.Result, error) {
		var res middleware.Result
		resp, res, held, handlerErr = s.run(ctx, req, info, handler)
		if begun, _ := middleware.TransactionBegun(ctx); begun && res.NotReplayable && s.oversized(resp) {
			// A commit cannot record it, and a transaction's outcome is
			// what a retry must find: rolled back instead (see
			// reasonResponseTooLarge).
			tooLarge = true
			middleware.DoNotRecord(ctx)
			return middleware.Result{}, nil
		}
		return res, nil
	}, opts...)
	if tooLarge && err == nil {
		s.cfg.logger.ErrorContext(ctx, "grpcinterceptor: the handler's response is larger than the response limit, so its transaction was rolled back",
			slog.String("method", info.FullMethod), slog.Int("limit", s.cfg.maxResponse))
		return nil, s.refusal(codes.Internal, reasonResponseTooLarge, fmt.Sprintf(
			"the response exceeds %d bytes, the most a call's database transaction can record; the transaction was rolled back, so nothing of the call was kept", s.cfg.maxResponse), 0, nil)
	}
	if held != nil && err == nil {
		// Metadata held until the work's transaction committed: sent now
		// that it did (or that nothing was to commit), dropped with the
		// refusal below if it did not.
		held.send()
	}
	switch {
	case err != nil:
		meta := s.keyMeta
		if field != nil {
			meta = s.fieldMeta
		}
		return s.refuse(ctx, meta, err)
	case out.Replayed:
		return s.replay(ctx, out.Value)
	}
	return resp, handlerErr
}

// run calls the handler with a capturing stream and decides what the guard
// records; held is the handler's metadata held in the transactional mode
// (nil outside it). A panic is answered Internal.
func (s *server) run(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, res middleware.Result, held *heldStream, err error) {
	hctx, cs, held := newMetadataCapture(ctx, s.cfg.keepMetadata)
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		s.cfg.logger.ErrorContext(ctx, "grpcinterceptor: the handler panicked", slog.String("method", info.FullMethod),
			slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
		st := status.New(codes.Internal, "grpcinterceptor: the handler panicked")
		resp, err = nil, st.Err()
		res = s.verdict(ctx, cs, nil, st, s.cfg.policy.Panic)
	}()
	resp, err = handler(hctx, req)
	if err != nil {
		// As the gRPC server does: a status error keeps its status, a
		// context error becomes Canceled or DeadlineExceeded, anything
		// else Unknown.
		st, ok := status.FromError(err)
		if !ok {
			st = status.FromContextError(err)
		}
		return resp, s.verdict(ctx, cs, nil, st, !s.forget.has(st.Code()) && (s.cfg.policy.TryAgain || !hasRetryInfo(st))), held, err
	}
	return resp, s.verdict(ctx, cs, resp, nil, !s.forget.has(codes.OK)), held, nil
}

// verdict encodes the outcome for the record: the response message (st ==
// nil) or the status, with the metadata the handler set.
func (s *server) verdict(ctx context.Context, cs metadataCapture, resp any, st *status.Status, store bool) middleware.Result {
	if !store {
		middleware.DoNotRecord(ctx)
		return middleware.Result{}
	}
	rec := stored{status: st != nil}
	rec.header, rec.trailer = cs.recorded()
	var (
		b   []byte
		err error
	)
	if st != nil {
		rec.payload, err = proto.Marshal(st.Proto())
		b = encode(make([]byte, 0, prefixSize(rec)+len(rec.payload)), rec)
	} else {
		m, ok := resp.(proto.Message)
		if !ok {
			// Another codec's message (or none): it ran, and cannot be
			// replayed.
			return middleware.Result{NotReplayable: true}
		}
		rec.messageName = m.ProtoReflect().Descriptor().FullName()
		if _, err := s.cfg.types.FindMessageByName(rec.messageName); err != nil {
			// No replay could rebuild it: say so now rather than keep a
			// record that is unreadable until it expires.
			s.cfg.logger.ErrorContext(ctx, "grpcinterceptor: the response type is not in the message types; recorded as not replayable",
				slog.String("type", string(rec.messageName)))
			return middleware.Result{NotReplayable: true}
		}
		size := prefixSize(rec) + proto.Size(m)
		if size > s.cfg.maxResponse {
			return middleware.Result{NotReplayable: true} // not encoded: it would not be kept
		}
		// Size just measured the unchanged message: its cached size serves
		// the encoding, into a buffer of the size it will have.
		b = appendPrefix(make([]byte, 0, size), rec)
		b, err = proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, m)
	}
	if err != nil || len(b) > s.cfg.maxResponse {
		return middleware.Result{NotReplayable: true}
	}
	return middleware.Result{Value: b}
}

// oversized reports whether resp is a response message whose encoding is
// larger than the response limit.
func (s *server) oversized(resp any) bool {
	m, ok := resp.(proto.Message)
	return ok && proto.Size(m) > s.cfg.maxResponse
}

// replay rebuilds a recorded answer and restores its metadata, marked
// replayed.
func (s *server) replay(ctx context.Context, value []byte) (any, error) {
	a, err := s.rebuild(value)
	if err != nil {
		s.cfg.logger.ErrorContext(ctx, "grpcinterceptor: a recorded answer cannot be rebuilt", slog.String("error", err.Error()))
		return nil, s.refusal(codes.Unavailable, reasonRecordUnreadable,
			"the call with this idempotency key ran, but its recorded answer cannot be rebuilt by this server", s.cfg.retryDelay, nil)
	}
	header := a.header
	if header == nil {
		header = make(metadata.MD, 1)
	}
	withoutCredentials(header)
	withoutCredentials(a.trailer)
	header[replayedMetadataKey] = []string{"true"}
	// An error here means the transport went away: the answer below
	// fails the same way.
	_ = grpc.SetHeader(ctx, header)
	if len(a.trailer) > 0 {
		_ = grpc.SetTrailer(ctx, a.trailer)
	}
	return a.resp, a.err
}

// answer is a rebuilt record: the response message or the status error,
// and the metadata to restore.
type answer struct {
	resp            any
	err             error
	header, trailer metadata.MD
}

// decodeStatus decodes the recorded status of a failed call: an OK one
// was never recorded, so it is errCorrupt.
func decodeStatus(payload []byte) (*status.Status, error) {
	sp := new(spb.Status)
	if err := proto.Unmarshal(payload, sp); err != nil {
		return nil, err
	}
	if codes.Code(sp.GetCode()) == codes.OK {
		return nil, errCorrupt
	}
	return status.FromProto(sp), nil
}

// rebuild decodes a record into the answer it holds.
func (s *server) rebuild(value []byte) (answer, error) {
	rec, err := decode(value)
	if err != nil {
		return answer{}, err
	}
	a := answer{header: rec.header, trailer: rec.trailer}
	if rec.status {
		st, err := decodeStatus(rec.payload)
		if err != nil {
			return answer{}, err
		}
		a.err = st.Err()
		return a, nil
	}
	mt, err := s.cfg.types.FindMessageByName(rec.messageName)
	if err != nil {
		return answer{}, err
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(rec.payload, m); err != nil {
		return answer{}, err
	}
	a.resp = m
	return a, nil
}

// reject refuses a call before it reaches the guard (InvalidArgument with
// the key's ErrorInfo, whose metadata is meta), and reports it.
func (s *server) reject(ctx context.Context, op middleware.CallOption, reason, msg string, meta map[string]string, details ...protoadapt.MessageV1) error {
	s.guard.Bypass(ctx, middleware.EventRejected, errors.New("grpcinterceptor: "+reason+": "+msg), op)
	return s.refusal(codes.InvalidArgument, reason, msg, 0, meta, details...)
}

// rejectField refuses a call whose key field holds a malformed key (err,
// from parseKey): InvalidArgument with the key's ErrorInfo and a
// BadRequest naming the field.
func (s *server) rejectField(ctx context.Context, op middleware.CallOption, err error) error {
	var ke *keyError
	errors.As(err, &ke)
	field := string(s.cfg.keyField)
	return s.reject(ctx, op, reasonKeyMalformed, "malformed idempotency key in "+field+": "+ke.reason, s.fieldMeta,
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{
			Field: field, Description: "malformed idempotency key: " + ke.reason, Reason: reasonKeyMalformed,
		}}})
}

// refuse answers a call the guard did not run; keyMeta is the ErrorInfo
// metadata of a key refusal.
func (s *server) refuse(ctx context.Context, keyMeta map[string]string, err error) (any, error) {
	switch {
	case errors.Is(err, middleware.ErrInvalidKey):
		// The key was checked, so only its length with the scope and
		// namespace is left: the guard reported the call rejected.
		return nil, s.refusal(codes.InvalidArgument, reasonKeyMalformed,
			"malformed idempotency key: the key is too long for its scope; use a shorter key", 0, keyMeta)
	case errors.Is(err, middleware.ErrCredentialsMismatch):
		return nil, s.refusal(codes.FailedPrecondition, reasonCredentialsMismatch,
			"this idempotency key was used by a call with other credentials; use a new key for a new request", 0, nil)
	case errors.Is(err, middleware.ErrMismatch):
		return nil, s.refusal(codes.FailedPrecondition, reasonKeyReused,
			"this idempotency key was used with a different request; use a new key for a new request", 0, nil)
	case errors.Is(err, middleware.ErrInProgress):
		return nil, s.refusal(codes.Aborted, reasonInProgress,
			"the first call with this idempotency key has not finished; retry later with the same key and request", s.cfg.retryDelay, nil)
	case errors.Is(err, middleware.ErrNotReplayable):
		return nil, s.refusal(codes.FailedPrecondition, reasonNotReplayable,
			"the call with this idempotency key was executed, but its answer could not be kept for replay "+
				"(larger than the capture limit, or not a protobuf message this server can rebuild); it will not be executed again", 0, nil)
	case errors.Is(err, store.ErrUnsealable):
		// The call ran, and its record is there but cannot be opened:
		// running it again is never right, fail-open or not.
		s.cfg.logger.ErrorContext(ctx, "grpcinterceptor: a recorded answer cannot be opened", slog.String("error", err.Error()))
		return nil, s.refusal(codes.Unavailable, reasonRecordUnreadable,
			"the call with this idempotency key ran, but its recorded answer is unreadable; it will not be executed again", s.cfg.retryDelay, nil)
	case errors.Is(err, store.ErrWorkConflict):
		return nil, s.refusal(codes.Aborted, reasonTransactionConflict,
			"the call's database transaction conflicted with a concurrent one and was rolled back, so nothing of it was kept; retry with the same key and request", s.cfg.retryDelay, nil)
	case errors.Is(err, store.ErrWorkFailed):
		return nil, s.refusal(codes.Internal, reasonTransactionFailed,
			"the call's database transaction failed at its commit and was rolled back, so nothing of it was kept", 0, nil)
	case errors.Is(err, middleware.ErrUnavailable) && idemkit.CodeOf(err).Permanent():
		// Retrying cannot help; the guard logged why.
		return nil, s.refusal(codes.Internal, reasonMisconfigured,
			"the idempotency backend refuses this service until its setup is fixed, so the call was not executed", 0, nil)
	case errors.Is(err, middleware.ErrUnavailable):
		transient := idemkit.CodeOf(err).Transient()
		msg := "the idempotency backend cannot be reached, so the call was not executed; retry later with the same key"
		if !transient {
			msg = "the idempotency backend failed, so the call was not executed; retry later with the same key"
		}
		return nil, s.refusal(codes.Unavailable, reasonUnavailable, msg, s.cfg.retryDelay, nil)
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	s.cfg.logger.ErrorContext(ctx, "grpcinterceptor: unexpected guard error", slog.String("error", err.Error()))
	return nil, s.refusal(codes.Unavailable, reasonUnavailable, "the idempotency backend failed", s.cfg.retryDelay, nil)
}
