// Package idemkit holds what every idemkit package shares: the failure
// codes, their sentinels and the one error type, [Error].
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
// errors. The packages themselves live below this one: the guard in
// middleware, the adapters in nethttp, ginadapter, echoadapter and
// grpcinterceptor, the guard's backends under store, and the lock library
// under lock.
package idemkit
