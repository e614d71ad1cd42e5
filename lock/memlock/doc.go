// Package memlock is an in-process [lock.Locker]: the full semantics of
// idemkit's distributed lock backends (lock ids, fences that only grow, one
// liveness rule, atomic ownership checks) for tests and single-node
// services.
//
// It passes the conformance suite in
// [github.com/idemkit/idemkit/lock/locktest]. Its clock can be injected
// ([WithClock]) so tests step across expiry boundaries exactly. It is a
// [lock.Watcher]: [lock.Do] waiters wake the moment a lock is released and
// leave the moment their ctx ends.
//
// Fences come from the clock, as on every backend: a new lease's fence is
// the key's previous fence plus one or the clock in Unix milliseconds,
// whichever is greater ([github.com/idemkit/idemkit/lock/provider.NextFence]). No counter is kept: a lock
// released before the clock has passed its fence leaves a tombstone (the
// fence alone) until then ([github.com/idemkit/idemkit/lock/provider.KeepUntil]).
//
// Memory is bounded by what is live: expired lock records (once
// [lock.CleanupGrace] has passed) and tombstones (once the clock has passed
// their fence) are swept as the locker works, at an amortised constant
// cost per acquire.
package memlock
