// Package memstore is an in-process backend for the guard: a [store.Store]
// whose records carry their own lease, and a [store.Records] (fenced plain
// records, for [github.com/idemkit/idemkit/middleware.Compose]). It is for tests and single-node services.
//
// Its clock can be injected ([WithClock]) so tests step across lease and
// expiry boundaries exactly; by default the process clock judges leases and
// expiry. Fences follow the rules of [store] with no tombstones: released
// and deleted records go at once, and one floor for the whole store (the
// highest fence of every record it removed) keeps every key's next fence
// above all it carried, whatever the clock does. Expired entries are swept
// as the store works, at an amortised constant cost per write. It is a
// lock.Finder (an index of the claims whose fingerprint is a lock id), so
// a [github.com/idemkit/idemkit/lock.Client] over it resolves any lock id.
//
// It is a [store.Stepper]: a claim's steps live in its record (nothing
// when there are none); a Release of a claim with steps leaves its
// fingerprint, fence and steps (invisible to Get, claimable at once) until
// the claim's retention and the steps' keep have passed, and a Delete
// removes them even then. Steps count their names and results against
// WithMaxBytes and, like an outcome, always land (their work ran).
//
// The store is bounded in keys and bytes ([WithMaxEntries], [WithMaxBytes]):
// a full store sweeps at once and refuses what still does not fit with
// RateLimited, which the guard reports as unavailable (HTTP 503 with
// Retry-After) without running the request. To make room it never drops a
// live claim, nor a record before its TTL. The outcome of a claim it
// granted always lands, even beyond the byte limit (the request ran;
// refusing its outcome would let a retry run it again): the store then
// holds more than WithMaxBytes by at most the responses of the claims
// running when it filled up, and refuses new claims until enough expires.
//
// A key counts its key, fingerprint and response plus 128 bytes against
// WithMaxBytes, and holds 50 to 160 bytes of heap more (its map slot, and
// Go's rounding of each allocation), so the store's live heap stays under
// WithMaxBytes plus 200 bytes a key. Measured: a record of a 200-byte
// response under a 48-byte key counts 448 bytes and holds about 520 bytes
// of heap; 1,000,000 of them (the default key limit) hold about 520 MB
// (560 MB of heap in use, 610 MB resident). The byte limit (1 GiB by
// default) is the one reached first once responses average over about 800
// bytes. While records expire as new ones arrive, the heap in use can reach
// about twice the live heap, as a live record keeps in use the memory it
// shares with the garbage of the requests around it.
//
// It passes the conformance suite in
// [github.com/idemkit/idemkit/store/storetest].
package memstore
