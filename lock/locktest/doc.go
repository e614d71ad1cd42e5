// Package locktest is the lock conformance suite: it runs the lock library
// ([lock.Client]) over a store engine, and every engine passes it (memstore
// in this module; Redis, PostgreSQL and Firestore in theirs, against real
// servers).
//
// An engine's test calls [Run] with a [Factory] that builds a fresh,
// isolated store for each case, together with the probes the suite needs
// ([Env]); the suite builds the Client:
//
//	func TestLockConformance(t *testing.T) {
//		locktest.Run(t, func(t *testing.T, cfg locktest.Config) *locktest.Env {
//			s := mystore.New(client, mystore.WithKeyPrefix(uniquePrefix(t)))
//			return &locktest.Env{Store: s, RaiseFence: ..., Fence: ..., Stored: ..., Break: ...}
//		})
//	}
//
// The cases cover acquire, contention, fences (derived from the backend's
// clock, growing, surviving release, expiry and restart even when far
// ahead of the clock, limits), no state without an expiry (when the Env
// can list it, [Env.Keys]), key normalisation and length, lock-id
// validation before any I/O, release and extend semantics, lookups and
// their redaction, ended contexts, transport failures, the liveness rule
// at expiry − ε, expiry and expiry + ε, keys that look like internal
// records, exactly one holder at any instant under a race, and the helpers
// on the engine: [lock.Do] (retries, deadline, cancellation, wake-ups,
// renewal, lease loss, detached release), [lock.Handle] (at-most-once
// release, release timeout) and the telemetry decorator.
//
// Time-dependent cases step an injected clock exactly when the engine
// allows one ([Env.Advance]); otherwise they sleep with TTLs scaled by
// [Env.Margin].
package locktest
