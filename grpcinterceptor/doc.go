// Package grpcinterceptor makes unary gRPC methods idempotent: a server
// interceptor runs a call at most once per idempotency key across every
// server that shares the guard's backend and replays its answer to
// retries ([New]), and a client interceptor gives every call a key and
// keeps it across retries ([NewClientInterceptor]).
//
//	guard, err := middleware.New(memstore.New())
//	...
//	idem, err := grpcinterceptor.New(guard)
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
// The key travels in the metadata entry "idempotency-key" ([WithMetadataKey]).
// Statuses the interceptor answers itself carry a google.rpc.ErrorInfo with
// the reason below and the domain "idemkit.dev" ([WithErrorDomain]); where
// waiting helps, a google.rpc.RetryInfo (1 s by default, [WithRetryDelay]).
//
//	method not guarded (by default: declared IDEMPOTENT
//	  or NO_SIDE_EFFECTS, gRPC's health, reflection and
//	  channelz services, or listed in WithExclude)        pass through
//	streaming method                                      pass through (unguarded: the
//	                                                      interceptor is unary only)
//	no key (required by default)                          InvalidArgument IDEMPOTENCY_KEY_MISSING
//	no key, WithKeyRequired(false)                        pass through
//	key malformed (empty, > 255 chars, space, control
//	  or non-ASCII chars, a comma, several values)        InvalidArgument IDEMPOTENCY_KEY_MALFORMED
//	same key, same request, first still running past
//	  the wait budget                                     Aborted IDEMPOTENCY_KEY_IN_PROGRESS + RetryInfo
//	same key, other authorization metadata (no scope
//	  hook), whatever the request                         FailedPrecondition
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
//	recorded answer cannot be read or rebuilt (recorded
//	  by a server that knows a type this one does not,
//	  sealed with a key this one lacks, damaged record)   Unavailable IDEMPOTENCY_RECORD_UNREADABLE + RetryInfo;
//	                                                      never executed again, even with WithFailOpen
//	handler answered Unavailable, Internal, Unknown,
//	  DeadlineExceeded, Canceled or ResourceExhausted     delivered, not recorded (see WithStorePolicy):
//	                                                      the claim is released, a retry runs again
//	handler panicked                                      Internal, not recorded
//
// # Keys, scope and fingerprint
//
// A key is one metadata value of 1 to 255 visible ASCII characters, taken
// literally (case-sensitive). It lives in the principal's namespace
// ([WithScope]), shared by every method of the service (the full method
// name is part of the fingerprint, so a key reused with another method is
// refused, as the HTTP adapters refuse a key reused on another route), so
// one client's key never replays another client's answer. Without a scope
// hook, every guarded call is bound to its "authorization" metadata
// instead (only a keyed hash of it is stored): a call with other
// credentials is refused, never answered with another caller's response.
// Credential metadata ("authorization", "proxy-authorization", "cookie",
// "set-cookie") is never recorded nor replayed. The fingerprint
// ([WithFingerprint]) is the SHA-256 of the full method name and the
// request's deterministic protobuf encoding: the same key with another
// request is refused, never answered with the other request's response.
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
// Streaming methods are not guarded: register only the unary interceptor,
// and make streaming methods idempotent by other means.
//
// # The client
//
// The interceptor of [NewClientInterceptor] attaches a fresh UUIDv4 key to
// each call of a selected method that has none, before the call, so
// grpc-go's transparent and policy retries resend it; with
// [WithMaxAttempts] it retries Unavailable, ResourceExhausted and
// in-progress Aborted itself, with the same key, capped exponential
// back-off with jitter ([WithBackoff]), honouring RetryInfo and the call's
// context (when the next attempt could only start after the deadline, it
// returns the last attempt's error at once).
//
// Both interceptors take the same [Option] type: [WithMetadataKey],
// [WithSelector] and [WithErrorDomain] configure either, so one list can
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
package grpcinterceptor
