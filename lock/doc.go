// Package lock is idemkit's distributed-lock library over any store engine:
// a Redis lock is lock.New(redisstore.New(client)), an in-memory one
// lock.New(memstore.New()).
//
// A lock is a claim of the lock key whose record carries the holder's lock
// id (22 base64url characters from crypto/rand) instead of a fingerprint.
// [Client.Acquire] makes one attempt and returns a [Lease] (key, id, fence,
// acquired-at, expires-at) or "locked", a result rather than an error;
// Release and Extend are the store's fenced writes and report in a [Status]
// whether they took effect (a lease that ran out can be neither released
// nor extended). The lookups name keys and ids by hashes ([Info]); only
// [LookupKeyRaw] and [LookupIDRaw] return them raw. Keys are normalised to
// NFC, at most [MaxKeyBytes] bytes, and are the store keys as they are.
// Fences and time are the store's: the rules are stated once, in the
// [store] package doc.
//
// [Do] runs a function while holding a lock (retries woken by the store's
// notification, renewal, release on a detached context); [Acquire] returns
// a [Handle] with at-most-once release; [WithTelemetry] reports every call
// of any [Locker], the interface a third-party provider implements. No
// error message or log line of the library holds a raw key or lock id.
// Every engine passes [github.com/idemkit/idemkit/lock/locktest]; the
// repository's docs/locks.md explains more.
package lock
