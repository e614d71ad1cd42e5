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
// Memory: expired lock records are swept as the locker works. Fence counters
// are kept per key for the life of the locker unless [WithFenceRetention]
// lets idle ones go (fences stay monotone either way).
package memlock
