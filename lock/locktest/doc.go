// Package locktest is the conformance suite every [lock.Locker] passes:
// the in-memory provider in this module and the Redis, PostgreSQL and
// Firestore providers in theirs, against real servers.
//
// A provider's test calls [Run] with a [Factory] that builds a fresh,
// isolated provider for each case, together with the probes the suite
// needs ([Env]):
//
//	func TestConformance(t *testing.T) {
//		locktest.Run(t, func(t *testing.T, cfg locktest.Config) *locktest.Env {
//			l := mylock.New(client, mylock.WithKeyPrefix(uniquePrefix(t)), ...)
//			return &locktest.Env{Locker: l, RaiseFence: ..., Fence: ..., Stored: ..., Break: ...}
//		})
//	}
//
// The cases cover acquire, contention, fences (derived from the backend's
// clock, growing, independent per key, surviving release, expiry, cleanup
// and restart even when far ahead of the clock, limits), no state without
// an expiry (when the Env can list it, [Env.Keys]), key normalisation and
// length, lock-id validation before any I/O, release and extend semantics,
// is-locked and its cleanup, lookups and their redaction, ended contexts,
// transport failures, the liveness rule at expiry − ε, expiry and
// expiry + ε, keys that look like internal records, exactly one holder at
// any instant under a race, and the shared helpers run on the provider: [lock.Do] (retries, deadline,
// cancellation, renewal, lease loss, detached release), [lock.Handle]
// (at-most-once release, release timeout) and the telemetry decorator.
//
// Time-dependent cases step an injected clock exactly when the provider
// allows one ([Env.Advance]); otherwise they sleep with TTLs scaled by
// [Env.Margin].
package locktest
