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
// The key travels in the metadata entry "idempotency-key" or in a request
// field ([WithKeyField]). A replay rebuilds the recorded message or status
// and its header and trailer metadata, and sets idempotent-replayed: true
// ([Replayed]). A reused key with another request is FailedPrecondition, a
// duplicate still running past the wait budget Aborted, a backend outage
// Unavailable, each with a google.rpc.ErrorInfo ([ErrorInfoOf]) whose
// reason is stable. Without a scope hook ([WithScope]) every call is bound
// to its credentials, as over HTTP. Streaming methods are not guarded.
//
// Both interceptors take the same [Option]s, so one list can serve both
// ends; an option of one given to the other is refused. List the client
// interceptor before any other retrying interceptor, so the key is set
// once for all attempts.
//
// docs/grpc.md has the table of every situation and its status and
// reason, the transactional mode and the client's retries.
package grpcinterceptor
