// Package connectinterceptor makes unary Connect procedures idempotent,
// over the Connect, gRPC and gRPC-Web protocols alike: a handler
// interceptor runs a call at most once per idempotency key across every
// server that shares the guard's backend and replays its answer to retries
// ([New]), and a client interceptor gives every call a key and keeps it
// across retries ([NewClient]).
//
//	guard, err := middleware.New(memstore.New())
//	...
//	idem, err := connectinterceptor.New(guard, connectinterceptor.WithKeyRequired(true))
//	...
//	path, handler := ordersv1connect.NewOrderServiceHandler(svc, connect.WithInterceptors(idem))
//
//	keys, err := connectinterceptor.NewClient(connectinterceptor.WithMaxAttempts(4))
//	...
//	client := ordersv1connect.NewOrderServiceClient(http.DefaultClient, url, connect.WithInterceptors(keys))
//
// The key travels in the Idempotency-Key header (the metadata
// idempotency-key over gRPC) or in a request field ([WithKeyField]). A
// replay rebuilds the recorded message or error (code, message, details)
// and its headers and trailers, and sets Idempotent-Replayed: true. The
// behaviour is grpcinterceptor's in Connect's codes: a reused key with
// another request is FailedPrecondition, a duplicate still running past
// the wait budget Aborted, a backend outage Unavailable, each with a
// google.rpc.ErrorInfo detail whose reason is stable, and a RetryInfo
// where a retry helps. Without a scope hook ([WithScope]) every call is
// bound to its Authorization header ([WithCredentialHeaders] adds
// others). By default procedures declared NO_SIDE_EFFECTS or IDEMPOTENT
// (connect.WithIdempotency, or the schema) and gRPC's health and
// reflection services are not guarded ([WithSelector]); streaming
// procedures never are. A handler that writes in the guarded work's
// transaction (pgstore.Tx) commits its writes with the record.
//
// Both interceptors take the same [Option]s, so one list can serve both
// ends; an option of one given to the other is refused.
//
// docs/grpc.md has the table of every situation and its code and reason.
package connectinterceptor
