// Package idemkit holds what every idemkit package shares: the failure
// codes, their sentinels and the one error type, [Error]; the fencing token,
// [Fence]; lease loss, [ErrLeaseLost]; the keyed hasher that names keys and
// lock ids in logs and events, [NewHMACHasher]; and the back-off, [Backoff].
//
// Every failure an idemkit package returns, from the lock providers to the
// record stores and the adapters' setup, is an [*Error] with a [Code]. It
// matches the code's sentinel with errors.Is and unwraps to the native cause
// (a go-redis error, a *pgconn.PgError, a gRPC status, a context error), so
// callers branch on what went wrong without knowing which backend they use:
//
//	if errors.Is(err, idemkit.ErrServiceUnavailable) { ... }
//	switch idemkit.CodeOf(err) { case idemkit.CodeNetworkTimeout: ... }
//
// Contention ("locked", "busy") and absence ("not found") are results, never
// errors. A lease lost while its holder was still working (a lock's or a
// guard's claim) is reported with an error that matches [ErrLeaseLost].
// The rule for fences (how they grow and how long a record keeps one) is
// stated once, in [github.com/idemkit/idemkit/store].
//
// The packages themselves live below this one: the guard in
// middleware, the adapters in nethttp, ginadapter, echoadapter,
// echo5adapter, grpcinterceptor and connectinterceptor, the guard's backends under store, and the lock library
// under lock.
package idemkit
