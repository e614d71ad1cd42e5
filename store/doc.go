// Package store is the contract of idemkit's engines: records that carry
// their own lease, written once per backend and shared by the guard
// ([github.com/idemkit/idemkit/middleware]) and the lock library
// ([github.com/idemkit/idemkit/lock]).
//
// # Leased records
//
// A [Record] is a claim while a request runs (State [StateClaimed], with a
// fence and a lease) and then its outcome ([StateCompleted] with the
// encoded response, or [StateNotReplayable]), kept for the record TTL. A
// request claims its key ([Store.Claim]), extends its lease while it runs,
// and completes the claim with its outcome in the same record, or releases
// it: one conditional write decides everything, so a replay costs one
// round trip and a first execution two. [Store.Get], [Store.Delete] and
// [Lister] ([List]) serve read paths and operators. A lock is a claim
// whose fingerprint is the holder's lock id.
//
// # Time, fences and expiry
//
// These rules hold on every engine; they are stated here once.
//
// Time is the backend's: leases and record expiry are judged by the
// backend's clock (Redis TIME, PostgreSQL clock_timestamp(), MySQL's
// UTC_TIMESTAMP(6), Firestore's commit and read times, the process clock in
// memory), never a client's. A
// record is live while now < ExpiresAt.
//
// Every claim has a fence, greater than any fence its key's record ever
// carried, including records that were released, deleted or expired, and
// whatever the backend's clock does. Extend, Complete and Release act only
// while the record still carries their claim's fence, so a holder whose key
// was claimed again can never write over the new holder. Extend and
// Release act only on a live claim; a holder whose lease ran out but whose
// key nobody claimed still completes (a slow store is never a second
// execution). A fence above [idemkit.FenceMax] is never issued: that Claim
// fails with Internal and writes nothing.
//
// Engines keep no counter for this: a new claim's fence is max(previous
// fence + 1, the backend's clock in Unix milliseconds), where the previous
// fence is the one the key's record (or what is left of it) carries. A
// record is never removed before the backend's clock has passed its fence
// read as Unix milliseconds plus the engine's largest clock step (each
// network engine's WithMaxClockStep; default one minute), so that a later
// fence is greater even after the clock stepped back, or a failover landed
// on a node whose clock is behind, by up to that much: a released claim or
// a deleted record leaves a tombstone (its fence only, invisible to Get,
// claimable at once) until then. An engine may instead keep one floor, the
// highest fence of every record it removed, under which no new fence falls
// (memstore does). Nor is a record removed before its ExpiresAt, or, for a
// claim, [ClaimRetention] past it. Every record, claim, outcome or
// tombstone, has an expiry on the backend: nothing is kept forever.
//
// # Steps
//
// An engine that is a [Stepper] records a claim's steps (recovery points:
// the steps of multi-step work that finished, with their results) in the
// claim's record, under its fence, and carries them over to the next claim
// of the same fingerprint when the claim ends without an outcome, so that
// the work resumes instead of starting over. The limits are [MaxSteps],
// [MaxStepNameBytes] and [MaxStepBytes].
//
// # Composition and sealing
//
// [Records] is a plain record store with a fenced put, which
// [github.com/idemkit/idemkit/middleware.Compose] pairs with any lock
// provider into a slower and weaker [Store]. [Seal] wraps any Store so that
// every response it writes is encrypted with AES-GCM under a key of yours.
//
// # Engines
//
// [github.com/idemkit/idemkit/store/memstore] in this module, and Redis,
// PostgreSQL, MySQL/MariaDB and Firestore engines in modules of their own. Every engine
// passes the conformance suites in
// [github.com/idemkit/idemkit/store/storetest] and
// [github.com/idemkit/idemkit/lock/locktest]; the helpers engines share are
// in [github.com/idemkit/idemkit/store/engine].
package store
