// Package storetest is the conformance suite every [store.Store] passes:
// the in-memory store in this module and the Redis, PostgreSQL and Firestore
// stores in theirs, against real servers.
//
// A store's test calls [Run] with a [Factory] that builds a fresh, isolated
// store for each case ([Env]). Time-dependent cases step an injected clock
// when the store allows one ([Env.Advance]); otherwise they sleep with TTLs
// scaled by [Env.Margin].
package storetest
