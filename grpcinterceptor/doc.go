// Package grpcinterceptor makes unary gRPC methods idempotent: a server
// interceptor runs a call at most once per idempotency key across every
// server that shares the guard's backend and replays its answer to
// retries ([New]), and a client interceptor gives every call a key and
// keeps it across retries ([NewClientInterceptor]).
//
//	guard, err := middleware.New(memstore.New())
//	...
//	idem, err := grpcinterceptor.New(guard, grpcinterceptor.WithKeyRequired(true))
//	...
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(idem))
//
//	keys, err := grpcinterceptor.NewClientInterceptor(grpcinterceptor.WithMaxAttempts(4))
//	...
//	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
//		grpc.WithChainUnaryInterceptor(keys))
//
// # Behaviour
//
// The key travels in the metadata entry "idempotency-key" ([WithMetadataKey])
// or in a field of the request ([WithKeyField]; see below). As over HTTP,
// a call without a key is served unguarded unless keys are required with
// [WithKeyRequired](true), which refuses it (InvalidArgument; HTTP: 400).
// Statuses the interceptor answers itself carry a google.rpc.ErrorInfo with
// the reason below and the domain "idemkit.dev" ([WithErrorDomain]); where
// waiting helps, a google.rpc.RetryInfo (1 s by default, [WithRetryDelay]).
//
//	method not guarded (by default: declared IDEMPOTENT
//	  or NO_SIDE_EFFECTS, gRPC's health, reflection and
//	  channelz services, or listed in WithExclude)        pass through
//	streaming method                                      pass through (unguarded: the
//	                                                      interceptor is unary only)
//	no key (the default: keys optional)                   pass through (runs every time,
//	                                                      nothing recorded)
//	no key, WithKeyRequired(true)                         InvalidArgument IDEMPOTENCY_KEY_MISSING
//	key malformed (empty, > 255 chars, space, control
//	  or non-ASCII chars, a comma, several values)        InvalidArgument IDEMPOTENCY_KEY_MALFORMED
//	key field (WithKeyField) set and malformed            InvalidArgument IDEMPOTENCY_KEY_MALFORMED
//	                                                      + BadRequest naming the field
//	key too long for its scope (key, scope and
//	  namespace over the store's 1024 bytes)              InvalidArgument IDEMPOTENCY_KEY_MALFORMED
//	same key, same request, first still running past
//	  the wait budget                                     Aborted IDEMPOTENCY_KEY_IN_PROGRESS + RetryInfo
//	same key, other credentials (no scope hook: other
//	  authorization metadata, client certificate or
//	  WithCredentialMetadata), whatever the request       FailedPrecondition
//	                                                      IDEMPOTENCY_KEY_CREDENTIALS_MISMATCH; the
//	                                                      recorded answer is never sent, nothing runs
//	same key, another request                             FailedPrecondition IDEMPOTENCY_KEY_REUSED
//	same key, same request, completed                     the recorded message or status (code, message,
//	                                                      details), header and trailer metadata, with
//	                                                      idempotent-replayed: true in the header
//	completed but not replayable (the answer was larger
//	  than WithMaxResponseBytes, 1 MiB by default, or a
//	  message of a type not in WithMessageTypes or of
//	  another codec)                                      FailedPrecondition IDEMPOTENCY_NOT_REPLAYABLE;
//	                                                      never executed again
//	backend unreachable                                   Unavailable IDEMPOTENCY_UNAVAILABLE + RetryInfo
//	                                                      (fail closed; WithFailOpen passes through)
//	backend misconfigured (missing table, permission or
//	  credentials refused); the guard logs the fix        Internal IDEMPOTENCY_MISCONFIGURED
//	recorded answer cannot be read or rebuilt (recorded
//	  by a server that knows a type this one does not,
//	  sealed with a key this one lacks, damaged record)   Unavailable IDEMPOTENCY_RECORD_UNREADABLE + RetryInfo;
//	                                                      never executed again, even with WithFailOpen
//	handler answered Unavailable, Internal, Unknown,
//	  DeadlineExceeded, Canceled, ResourceExhausted,
//	  Aborted or Unauthenticated, or any status with a
//	  RetryInfo detail                                    delivered, not recorded (see WithStorePolicy):
//	                                                      the claim is released, a retry runs again
//	handler panicked                                      Internal, not recorded
//
// # Keys, scope and fingerprint
//
// A key is one metadata value of 1 to 255 visible ASCII characters, taken
// literally (case-sensitive). Keys live in one namespace per principal
// ([WithScope]), shared by every method of the service: a key names one
// call of one method, and the full method name is part of the
// fingerprint, so a key reused with another method is refused
// (IDEMPOTENCY_KEY_REUSED), as the HTTP adapters refuse a key reused on
// another route; one client's key never replays another client's answer.
// Without a scope hook, every guarded call is bound to its credentials
// instead: its "authorization" metadata, the client certificate of its TLS
// connection, and the metadata [WithCredentialMetadata] names, such as
// "x-api-key" (only a keyed hash of them is stored): a call with other
// credentials is refused, never answered with another caller's response.
// Credential metadata ("authorization", "proxy-authorization", "cookie",
// "set-cookie" and that of WithCredentialMetadata) is never recorded nor
// replayed. The fingerprint ([WithFingerprint]) is the SHA-256 of the full
// method name and the request's deterministic protobuf encoding: the same
// key with another request is refused, never answered with the other
// request's response. Outcomes are kept for the guard's record TTL
// (middleware.WithRecordTTL), or this interceptor's ([WithRecordTTL]).
//
// # The key in a request field
//
// APIs that declare a request id in their request messages (a string
// field request_id, set by the client and kept across its retries) can
// have the key read from it: [WithKeyField]("request_id"). A request whose
// field is set has that value as its key, checked as a metadata key is,
// and its metadata key is not read; the field wins because it is part of
// the request the application built, the same in every retry of it, where
// a metadata key may be made afresh for each call by a client interceptor
// that does not know the field. A request whose field is empty takes its
// key from the metadata. A method whose request message has no such field,
// or one that is not a singular string, is served as without the option.
// Given to the client interceptor, the option fills an empty field (when
// the caller set no metadata key) with a fresh key in the caller's
// message, and sends no metadata key.
//
// # Observability
//
// Every call the interceptor sees has exactly one outcome, with the full
// method as its operation: those it hands to the guard (executed,
// replayed, mismatch, credentials-mismatch, in-progress, not-replayable,
// unavailable, failed-open, canceled, not-recorded), those it lets through
// (passed-through: a method not guarded, or no key where none is
// required) and those it refuses (rejected: no key where one is required,
// a malformed key, a request it cannot fingerprint). The guard's hooks (middleware.WithHook)
// get them with the call's context, so what an outer interceptor put in it
// (a trace span, a request id) is there, and the context a hook's start
// returns is the one the handler runs with. An interceptor listed before
// this one reads the outcome of its call from the context:
//
//	func accessLog(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
//		ctx, outcome := middleware.WatchOutcome(ctx)
//		resp, err := handler(ctx, req)
//		if e, ok := outcome(); ok {
//			slog.InfoContext(ctx, "call", "method", info.FullMethod, "idempotency", e.Kind.String())
//		}
//		return resp, err
//	}
//
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(accessLog, idem))
//
// A guarded handler reads its key, scope, operation and fence with
// middleware.CallInfoFrom(ctx) (the fence orders the claims of one key: pass
// it to writes that must refuse a holder whose claim was taken over), and
// can ask that its answer not be recorded with middleware.DoNotRecord(ctx)
// (a wrong one-time password, say): the answer is delivered, the claim
// released, and a retry runs the handler again.
//
// # Capture and replay
//
// The metadata the handler sets with grpc.SetHeader, grpc.SendHeader and
// grpc.SetTrailer is recorded (except grpc-* entries; [WithReplayMetadata]
// narrows it). The handler keeps grpc-go's own stream in its context, so
// grpc.SetSendCompressor and grpc.ClientSupportedCompressors work: the
// interceptor reads the metadata back from that stream when the handler
// returns. Under a transport whose stream cannot report its metadata, the
// handler gets a stream in front of it that records the calls instead (and
// those two functions, which need grpc-go's stream, fail there as they
// would under any such wrapper). The response message is recorded as its
// protobuf encoding and its full name, and rebuilt on replay through
// protoregistry.GlobalTypes ([WithMessageTypes]); an error as its
// google.rpc.Status.
//
// In the transactional mode (the handler writes in the guarded work's
// transaction, pgstore.Tx, whose commit completes the record), what the
// handler sets with those three functions once its work began the
// transaction is held: none of it reaches grpc-go's stream until the
// commit landed, and then it is sent (a header the handler sent with
// grpc.SendHeader first), recorded and replayed as above. When the commit
// fails, it is dropped, and the client gets none of the handler's header
// or trailer entries: Unavailable (IDEMPOTENCY_UNAVAILABLE) when the
// claim was taken over or the lease lost; Internal
// (IDEMPOTENCY_TRANSACTION_FAILED) when the transaction itself failed (a
// statement the handler let fail, a deferred constraint); Aborted with
// RetryInfo (IDEMPOTENCY_TRANSACTION_CONFLICT) when it lost a
// serialization conflict or a deadlock. Either way nothing of it was kept
// and a retry runs the handler again. A response message larger than
// [WithMaxResponseBytes] is rolled back (Internal,
// IDEMPOTENCY_RESPONSE_TOO_LARGE). Metadata set before the work began the transaction went to
// grpc-go's stream then, and reaches the client whatever becomes of the
// transaction: call Tx first. From Tx on, the handler's context holds the
// interceptor's stream in front of grpc-go's, so grpc.SetSendCompressor
// and grpc.ClientSupportedCompressors work only before Tx.
//
// Streaming methods are not guarded (register only the unary
// interceptor, and make streaming methods idempotent by other means), so
// none of this applies to them: their metadata goes out as the handler
// sets it.
//
// # The client
//
// The interceptor of [NewClientInterceptor] attaches a fresh UUIDv4 key to
// each call of a selected method that has none (in the metadata, or with
// [WithKeyField] in the request's empty key field), before the call, so
// grpc-go's transparent and policy retries resend it; with
// [WithMaxAttempts] it retries Unavailable, ResourceExhausted and
// in-progress Aborted itself, with the same key, capped exponential
// back-off with jitter ([WithBackoff]), honouring RetryInfo and the call's
// context (when the next attempt could only start after the deadline, it
// returns the last attempt's error at once).
//
// Both interceptors take the same [Option] type: [WithMetadataKey],
// [WithKeyField], [WithSelector] and [WithErrorDomain] configure either, so one list can
// serve both ends of a service; an option of one interceptor given to the
// other is refused at construction.
//
// Chain order matters with another retrying interceptor. In
// grpc.WithChainUnaryInterceptor(a, b), a runs first and calls b once per
// call; b is called once per attempt of a retrying a. The key must be in
// the context before the retrying starts, so list this interceptor before
// any retry interceptor:
//
//	grpc.WithChainUnaryInterceptor(
//		keys,                              // from NewClientInterceptor: attaches the key once
//		retry.UnaryClientInterceptor(...), // resends it on every attempt
//	)
//
// The other way round, the retrier calls this interceptor afresh for each
// attempt with a context that has no key, and each attempt gets a new key:
// the server runs every attempt. (Setting the key yourself, with
// metadata.AppendToOutgoingContext before the call, is safe in any order.)
// grpc-go's own retry policy runs below every interceptor and always
// resends the key.
//
// For operators' tools, [DecodeRecorded] turns a recorded call (the
// response middleware.Guard.Inspect reads) into its status, or its
// response message's name and encoding, and its metadata.
package grpcinterceptor
