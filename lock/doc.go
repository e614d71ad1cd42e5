// Package lock is idemkit's distributed-lock library, over any store
// engine: [New] returns a [Client] over a [store.Store], so a Redis lock is
// lock.New(redisstore.New(client)) and an in-memory one
// lock.New(memstore.New()).
//
// A lock is a claim of the lock key whose record carries the holder's lock
// id (22 base64url characters from crypto/rand) instead of a fingerprint.
// [Client.Acquire] makes one attempt and returns a [Lease] (key, id, fence,
// acquired-at, expires-at) or "locked", a result rather than an error.
// Release and Extend take the lock id and are the store's fenced writes;
// they report in a [Status] whether they took effect, and a lease that ran
// out can be neither released nor extended. IsLocked, LookupKey, LookupID
// and [Owns] read; the lookups name keys and ids by hashes ([Info]), and
// only [LookupKeyRaw] and [LookupIDRaw] return them raw. Keys are
// normalised to NFC and are at most [MaxKeyBytes] bytes; the store key is
// the normalised key as it is.
//
// Fences and time are the store's: the rules are stated once, in the
// [store] package doc. A Client finds the ids it issued in memory, and
// other processes' ids through the engine's [Finder], where it has one.
//
// [Do] runs a function while holding a lock (retries with capped, jittered
// back-off, woken by the store's notification; renewal; release on a
// detached context); [Acquire] returns a [Handle] with at-most-once
// release; [WithTelemetry] reports every operation of any [Locker] to a
// [Reporter]. Failures are [*idemkit.Error] values with a code; no error
// message or log line of the library holds a raw key or lock id.
//
// [Locker] is the interface a third-party provider implements; the helpers
// and [github.com/idemkit/idemkit/middleware.Compose] take any Locker.
// Every engine passes the conformance suite in
// [github.com/idemkit/idemkit/lock/locktest], run through a Client.
// docs/locks.md in the repository has the longer explanation.
package lock
