// Package storetest is the conformance suite every guard backend passes:
// the in-memory store in this module, the Redis, PostgreSQL and Firestore
// stores in theirs against real servers, and the composition of a record
// store with a lock provider ([github.com/idemkit/idemkit/middleware.Compose]).
//
// [Run] checks a [store.Store] (records that carry their own lease): claims
// on free, busy and run-out keys, completion and replay (a not-replayable
// outcome's response kept as given), what a take-over reports it replaced
// (store.Record.Replaced), stale holders, releases, fences that only grow,
// races on one key, faults. [RunRecords]
// checks a [store.Records] (the plain, fenced record store the composition
// builds on).
//
// A store's test calls them with a factory that builds a fresh, isolated
// store for each case ([Env], [RecordsEnv]). Time-dependent cases step an
// injected clock when the store allows one (Env.Advance); otherwise they
// sleep with TTLs scaled by Env.Margin. Optional capabilities of the Env
// (stalling the server, counting round trips, listing what the backend holds
// without an expiry, moving the backend's clock) turn on the cases that need
// them. [RunClock] runs the clock case alone (fences keep growing when the
// backend's clock steps back between a record's end and the next claim),
// for a test that starts a server for it.
package storetest
