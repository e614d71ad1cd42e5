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
// backend. [StorageKey] derives backend storage names so that no user key can
// ever address an internal record. Lock ids are 22 base64url characters from
// 16 crypto/rand bytes ([NewID]); anything else is refused with
// InvalidArgument before any I/O ([ValidateID]).
//
// A [Fence] is a per-key counter that only grows: it survives release,
// expiry and cleanup, prints as 15 zero-padded digits (string order equals
// numeric order) and never wraps: backends warn above [FenceWarn] and refuse,
// writing nothing, above [FenceMax].
//
// # Time
//
// One liveness rule holds on every backend ([Live]): a lease is live while
// now < ExpiresAt by the backend's time authority ([Capabilities]), with no
// grace period. Redis and PostgreSQL use the server's clock, the in-memory
// backend the process clock, Firestore the client's clock.
//
// # Errors
//
// Failures are [*idemkit.Error] values carrying a [Code] (InvalidArgument,
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
// capped, jittered back-off, stops the moment ctx ends, renews the lease
// while the function runs (cancelling the function's ctx if the lease is
// lost), and releases on return, panic or cancel with a detached context.
// [Acquire] returns a [Handle] with at-most-once release. [WithTelemetry]
// wraps any Locker to report one [Event] per operation, with keys and ids
// hashed by a keyed HMAC unless raw values are explicitly allowed.
// [SweepEvery] runs a backend's sweep of expired records in the background
// and logs its failures; the backends' StartSweeper methods are built on it.
package lock
