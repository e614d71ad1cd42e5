// Package firestorelock is a [lock.Locker] (and [lock.KeyedLocker] and
// [lock.Watcher]) on Google Cloud Firestore in Native mode, through a
// *firestore.Client of cloud.google.com/go/firestore. It passes the
// conformance suite in [github.com/idemkit/idemkit/lock/locktest] against
// Google's Firestore emulator. A [lock.Do] waiter is woken by a snapshot
// listener on the lock document instead of sleeping out its back-off.
//
//	client, err := firestore.NewClient(ctx, "my-project")
//	l, err := firestorelock.New(client)
//	err = lock.Do(ctx, l, "invoice:42", func(ctx context.Context, lease lock.Lease) error {
//		return issueInvoice(ctx, lease.Fence)
//	})
//
// # Time
//
// Firestore's own times are the time authority; no
// operation reads the clock of the process calling it. Every read that
// judges a lease (a document read, a query, a transaction's read) comes
// with the time Firestore read it, and the one liveness rule of every
// backend applies to that time: live ⇔ readTime < expiresAt ([lock.Live]).
// A lease granted or extended by an operation whose read Firestore served
// at T, with TTL d, has expiresAt = T + d: it is written after T, so it is
// live for at most d once it lands, and holder and contenders judge it by
// the same instant, whatever their clocks say. A client whose clock is
// seconds off takes over nothing early and keeps nothing late; there is
// nothing to synchronise but Google's own clocks. (The timers of
// [Locker.Watch] only wake waiters, who then try the lock: they judge
// nothing.)
//
// # Layout
//
// Locks live in one collection, named by [WithCollection] (default
// "idemkit_locks"). A key's document has the id "k:" and the normalised
// key itself when it is valid UTF-8 without "/" or control characters
// (every key of at most [lock.MaxKeyBytes] bytes fits Firestore's
// 1500-byte id limit), else "h:" and the base64url SHA-256 of the key. So
// any key works: "/" never creates a sub-collection, ".", ".." and
// "__x__" become "k:.", "k:.." and "k:__x__", and release, extend and
// lookups find the lock again.
//
//	<collection>/<id>   key         the normalised key (a string; bytes if not UTF-8)
//	                    lockId      the lock id (22 base64url characters)
//	                    fence       the lease's fence (an integer); absent when the lease was
//	                                created on a free key: its fence is then the document's
//	                                create time in Unix milliseconds
//	                    acquiredAt  the server's read time when the lease was granted
//	                    expiresAt   acquiredAt (or the last extend's read time) + TTL
//	                    expireAt    when the document may be deleted (the TTL-policy field)
//
// A tombstone is a document with key, fence and expireAt only: what a
// release, cleanup or sweep leaves of a lock while the server clock has
// not passed its fence. It is not a lock (not live, not found by lock id
// or lookups) and the next acquire replaces it.
//
// # Fences
//
// No counter is kept. A new lease's fence is [github.com/idemkit/idemkit/lock/provider.NextFence] of the
// fence the key's document carries, at the acquire's read time: the
// previous fence plus one, or the server clock in Unix milliseconds if
// that is greater. On a free key (no document) it is the create time of
// the new document, in milliseconds. A document is removed only once the
// server clock has passed its fence (a release or cleanup before then
// leaves a tombstone, and expireAt is never earlier than that instant), and
// Firestore's create times grow when a document is deleted and created
// again, so a key's next fence is greater than every fence it carried,
// through release, expiry, cleanup and sweeps, and nothing lives forever.
// Fences are 15-digit decimals near 1.8×10¹² (milliseconds), far below
// [idemkit.FenceMax]; an expireAt past Firestore's last timestamp
// (9999-12-31) is clamped to it.
//
// # Operations and round trips
//
//	Acquire, free key      2: one read, then one write-only Create; contenders fail fast
//	                       (AlreadyExists) without waiting for document locks
//	Acquire, tombstone     2: one read, then one write-only update conditioned on the update
//	                       time read; contenders fail fast (FailedPrecondition)
//	Acquire, expired lease 1 read, then a read-write transaction (3) that reads the document
//	                       again, judges it by that read's time, and only then writes
//	Acquire, live lease    1 read; nothing written, no fence consumed
//	Release, Extend        2: the query by lock id, then a delete, tombstone or update
//	                       conditioned on the document's update time (the ownership check
//	                       and the write are one atomic step; a document changed in between
//	                       is read again)
//	ReleaseKey, ExtendKey  2: the same through the key's document, without the query
//	IsLocked, LookupKey    1 read;  LookupID 1 query
//
// Acquires of one key that run at once in one process share those round
// trips: they join one read of the document, and one of them writes at a
// time; the others answer "locked" once it got the lease (see
// [Locker.Acquire]). A hot key's waiters, woken together by its release,
// so cost about two reads and one write, not a read and a write each.
//
// Contention is a result: an acquire that loses a commit, or whose
// transaction meets contention that outlasts the client's retries,
// answers "locked", and [lock.Do] retries it. Other failures are
// [*idemkit.Error] values mapped from the gRPC status code: Unavailable is
// ServiceUnavailable, DeadlineExceeded (and an ended ctx deadline, also
// when the server stalls) NetworkTimeout, PermissionDenied AuthFailed,
// ResourceExhausted RateLimited, and so on. Their messages never quote a
// document name (which would hold a key); the original status stays
// reachable through errors.As and status.FromError.
//
// A failed commit is an unknown outcome, settled by a read. The Firestore
// client retries a commit whose answer was lost (Unavailable), and the
// retry meets what the first try left: its own precondition fails, or,
// inside a transaction, the transaction has ended (InvalidArgument). So
// after a failed commit an acquire reads the document and returns the
// lease if it carries this call's lock id, an extend reports OK if the
// document holds the lease with the expiry it wrote, and a release reports
// OK if the lease is gone and that read came before the lease's expiry
// (expired otherwise: see [Locker.Release]). Only when the read shows the
// commit did not land is its error reported, and never as
// InvalidArgument.
//
// # Waiting: snapshot listeners
//
// [Locker.Watch] (which [lock.Do] uses between attempts) listens to the
// key's lock document with a snapshot listener, one per watched key,
// shared by every watch of the key in the process. Firestore sends the
// listener the write that ends a lease (a release's delete or tombstone,
// a takeover), so nothing is added to any operation: no write, no round
// trip. The first snapshot tells whether the key is held (a free key's
// watch fires at once, so nothing released before the watch was in place
// is missed); every later one that shows the lease gone or replaced wakes
// the key's watches, which then try the lock. This locker's own reads
// and writes of the document count as news too, ordered with the
// snapshots by their Firestore times: a release through it wakes the
// key's watches in the process as soon as it returns. Expiry writes
// nothing: the listener keeps a timer to the lease's expiry, counted from
// the time of the news that showed it, and wakes the watches when it runs
// out.
//
// Each listener is a Listen stream on the client's connection, so at most
// [WithWatchLimit] keys (default 32) have one at once; a listener is
// stopped about 5 s after its last watch ended (a hot key's waiters keep
// one), or sooner when its slot is needed. The client retries a stream
// that breaks and resumes it where it stopped; a listener that fails for
// good wakes its watches once (a change may have been missed), and new
// listeners start again after a back-off from 100ms to 5s. Waiters keep
// their back-off throughout: a watch that cannot be set up, or a change
// that arrives late, delays a waiter by its back-off at most, never past
// its timeout.
//
// # Indexes
//
// LookupID, Release and Extend find a lock by its id with an equality query
// on the lockId field, and [Locker.Sweep] orders by expireAt. Both are
// served by Firestore's automatic single-field indexes, which exist in
// production and on the emulator for every field unless an exemption
// disables them; no composite index is needed. If a single-field exemption
// (or a database-wide setting) disables indexing of lockId or expireAt in
// the lock collection, those operations fail with InvalidArgument
// (Firestore answers FailedPrecondition); clear the exemption with
//
//	gcloud firestore indexes fields update lockId --collection-group=idemkit_locks --clear-exemption
//
// A deployment that relies on a TTL policy alone and never calls Sweep may
// exempt expireAt from indexing, as Google advises for TTL fields.
//
// # Garbage collection
//
// Every document carries expireAt: for a lease, its expiry plus
// [lock.CleanupGrace], moved by every extend and never before the server
// clock passes its fence; for a tombstone, the instant the server clock
// passes its fence. An expired lease stays until an acquire replaces it,
// IsLocked's optional cleanup ([WithCleanupInIsLocked]) collects it, or it
// is collected past its expireAt. In production, let Firestore collect
// documents with a TTL policy on expireAt for the lock collection group:
//
//	gcloud firestore fields ttls update expireAt --collection-group=idemkit_locks --enable-ttl
//
// (use your collection name if you changed it). Firestore deletes expired
// documents some time after expireAt (typically within a day, with no
// promise), never before it, so it never deletes a live lease or a fence
// the clock has not passed. The emulator does not apply TTL policies.
// Without a TTL policy, call [Locker.Sweep] now and then, or start
// [Locker.StartSweeper]: it collects due documents in batches, re-checking
// each in a transaction so that a lease taken or extended in the meantime
// is kept.
package firestorelock
