// Package lock is idemkit's distributed-lock layer: the contract every lock
// backend implements, the types and rules they share, and the helpers built
// on top of any backend.
//
// # The contract
//
// A [Locker] grants leases. [Locker.Acquire] makes one attempt and returns a
// [Lease] (key, lock id, fence, acquired-at, expires-at) or "locked";
// contention is a result, not an error. [Locker.Release] and
// [Locker.Extend] take the lock id, check ownership atomically and report
// whether they took effect in an [Outcome]; an expired lease can be neither
// released nor extended. [Locker.IsLocked], [Locker.LookupKey] and
// [Locker.LookupID] read state; [Owns] is LookupID as a boolean.
//
// Backends: [github.com/idemkit/idemkit/lock/memlock] in this module, and
// Redis, PostgreSQL and Firestore providers in modules of their own. Every
// backend passes the conformance suite in
// [github.com/idemkit/idemkit/lock/locktest].
//
// # Keys, ids and fences
//
// Keys are normalised to Unicode NFC and may be at most [MaxKeyBytes] (512)
// bytes after normalisation; any other byte sequence is a valid key on every
// backend. Lock ids are 22 base64url characters from 16 crypto/rand bytes
// ([NewID]); anything else is refused with InvalidArgument before any I/O
// ([ValidateID]).
//
// A [idemkit.Fence] is a per-key fencing token that only grows. No counter is kept:
// a new lease's fence is the previous fence of the key's lock record plus
// one, or the backend's clock in Unix milliseconds if that is greater, and
// a record is never removed before the backend's clock has passed its
// fence: a release before then leaves a
// tombstone (the fence alone; not live, not findable, acquirable) that
// expires on its own. So a key's next fence is greater than every fence it
// carried, after release, expiry, cleanup and restart alike, and every
// record has an expiry. A fence prints as 15 zero-padded digits (string
// order equals numeric order) and never wraps: backends warn above
// [idemkit.FenceWarn] and refuse, writing nothing, above [idemkit.FenceMax].
//
// # Time
//
// One liveness rule holds on every backend ([Live]): a lease is live while
// now < ExpiresAt by the backend's clock, with no grace period. Redis and
// PostgreSQL use the server's clock, Firestore the server's commit and read
// times, the in-memory backend the process clock; no backend trusts a
// client's clock.
//
// # Errors
//
// Failures are [*idemkit.Error] values carrying an [idemkit.Code] (InvalidArgument,
// ServiceUnavailable, NetworkTimeout, AcquisitionTimeout, Aborted, AuthFailed,
// RateLimited, Internal), the operation and the native cause. errors.Is
// matches both the code's sentinel ([idemkit.ErrInvalidArgument], ...) and the cause;
// errors.As reaches the native error. An ended context maps to Aborted
// (cancelled) or NetworkTimeout (deadline). No error message or library log
// line contains a raw key or lock id.
//
// # Helpers
//
// [Do] runs a function while holding a lock: it retries on contention with
// capped, jittered back-off ([idemkit.Backoff]) until its timeout, stops the
// moment ctx ends, renews the lease while the function runs (cancelling the
// function's ctx if the lease is lost), and releases on return, panic or
// cancel with a detached context. [Acquire] makes one attempt and returns a
// [Handle] with at-most-once release. [WithTelemetry] wraps any Locker to
// report one [Event] per operation, with keys and ids hashed by a keyed HMAC
// unless raw values are explicitly allowed.
//
// # Writing a backend
//
// A backend implements [Locker] (and, where it can, [KeyedLocker] and
// [Watcher]) and passes the conformance suite. It validates with
// [NormalizeKey], [ValidateID] and [ValidateTTL] before any I/O, issues lock
// ids with [NewID], judges liveness with [Live] and returns lookups built by
// [NewInfo]. What providers share beyond the contract (the fence rule, storage
// names, a sweeper loop) is in [github.com/idemkit/idemkit/lock/provider],
// out of lock users' way.
package lock
