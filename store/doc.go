// Package store is the guard's backend contract: records that carry their
// own lease.
//
// # Leased records
//
// A request claims its key ([Store.Claim]), runs, and completes the claim
// with its outcome in the same record ([Store.Complete]): one conditional
// write decides everything, so a replay costs one round trip and a first
// execution two. A [Record] is a claim while the request runs (State
// [StateClaimed], with a fence and a lease, ExpiresAt) and then its outcome
// ([StateCompleted] with the encoded response, or [StateNotReplayable]),
// kept for the record TTL. A live claim answers duplicates "busy"; a claim
// whose lease ran out is replaced by the next Claim. The holder extends its
// lease while it runs ([Store.Extend]) and releases the claim, storing
// nothing, when the work fails ([Store.Release]). [Store.Get] and
// [Store.Delete] serve read paths and operators, and [Lister], which every
// store of this repository implements, lists the records under a prefix a
// page at a time ([List] shows them as an operator sees them).
//
// Time is the backend's: leases and expiry are judged by the backend's
// clock, never a client's.
//
// # Fences
//
// Every claim has a fence, greater than any fence its key's record ever
// carried. Extend, Complete and Release act only while the record still
// carries their claim's fence, so a holder whose lease ran out and whose key
// was claimed again can never write over the new holder; a holder whose
// lease ran out but whose key nobody claimed still completes (a slow store
// is never a second execution).
//
// Stores keep no counter for this. A new claim's fence is the previous
// fence plus one, or the backend's clock in Unix milliseconds if that is
// greater. A record (a claim, an outcome, a released or deleted claim) is
// never removed from the backend before its clock has passed the record's
// fence, so a later claim's clock-derived fence is always greater, and
// every record still has an expiry: nothing is kept forever. [Store] states
// the rule in full, for anyone writing a backend.
//
// # Composition
//
// [Records] is a plain record store of outcomes with a fenced put; the
// guard's package composes one with any lock provider into a [Store]
// ([github.com/idemkit/idemkit/middleware.Compose]), for example PostgreSQL
// records with Redis locks. It is slower (more round trips) and weaker: its
// fence is the lock's, checked by the lock rather than by the record's own
// write.
//
// # Sealed records
//
// Recorded responses sit on the backend for the record TTL (a day by
// default), and they may hold card numbers, e-mail addresses or tokens.
// [Seal] wraps any [Store] so that every response it writes is encrypted
// with AES-GCM under a key of yours, on every backend alike. Only the
// response is encrypted: the fingerprint is a hash already, and record
// keys, states, fences and times stay readable for operators. Every
// outcome (empty and not-replayable ones too) is sealed with its record
// key, fingerprint, state, fence and lifetime as authenticated data, so
// a response copied to another key or request does not open, and a record
// whose state or fence was changed on the backend is refused. An outcome
// made to look free on the backend (its expiry moved into the past) is
// reported by the Claim that takes it over ([Record].Replaced), and Seal
// writes it back and replays it instead of running the work again; a
// record deleted outright, or erased along with its state, cannot be told
// from an expired one (see [Seal]). Sealing adds 51 bytes plus the key
// id's length to each response; a response that no longer fits the
// backend is recorded as executed but not replayable.
//
// Keys rotate without downtime: give the new key as an older key on every
// node, then make it current (keeping the old one as older) until the
// record TTL has passed, then drop the old one. A record that does not
// open (sealed under a key id that is no longer given, altered, changed on
// the backend, or written before sealing was turned on) is never replayed:
// Claim and Get fail with an Internal error matching [ErrUnsealable] that
// says why (naming the key id), and the guard answers that its backend is
// unavailable without running the work (HTTP 503 with Retry-After, gRPC
// Unavailable), until the key is given back, the record expires or an
// operator deletes it. An adapter's
// fail-open option lets such a request through unguarded, like any other
// backend failure: do not combine it with sealing.
//
// # Backends
//
// [github.com/idemkit/idemkit/store/memstore] in this module, and Redis,
// PostgreSQL and Firestore stores in modules of their own. Every store
// passes the conformance suite in
// [github.com/idemkit/idemkit/store/storetest]. Failures are
// [*idemkit.Error] values with a code; a busy key, a refused write and
// absence are results.
package store
