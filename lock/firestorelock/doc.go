// Package firestorelock is a [lock.Locker] (and [lock.KeyedLocker]) on
// Google Cloud Firestore in Native mode, through a *firestore.Client of
// cloud.google.com/go/firestore. It passes the conformance suite in
// [github.com/idemkit/idemkit/lock/locktest] against Google's Firestore
// emulator, with an injected clock and with the real one.
//
//	client, err := firestore.NewClient(ctx, "my-project")
//	l, err := firestorelock.New(client)
//	err = lock.Do(ctx, l, "invoice:42", func(ctx context.Context, lease lock.Lease) error {
//		return issueInvoice(ctx, lease.Fence)
//	})
//
// # Layout
//
// Locks live in one collection and fence counters in another, named by
// [WithCollection] (default "idemkit_locks") and [WithFenceCollection]
// (default "idemkit_lock_fences"); [New] refuses the same name for both.
// Both documents of a key have the id [DocID] of the normalised key: "k:"
// and the key itself when it is valid UTF-8 without "/" or control
// characters (and fits Firestore's 1500-byte id limit, which every key of
// at most [lock.MaxKeyBytes] bytes does), else "h:" and the base64url
// SHA-256 of the key. So any key works: "/" never creates a
// sub-collection, ".", ".." and "__x__" become "k:.", "k:.." and
// "k:__x__", and release, extend and lookups find the lock again.
//
//	<locks>/<DocID(key)>    key         the normalised key (a string; bytes if not UTF-8)
//	                        lockId      the lock id (22 base64url characters)
//	                        fence       the lease's fence (an integer)
//	                        acquiredAt  when the lease was granted (client clock)
//	                        expiresAt   when it runs out (client clock)
//	                        expireAt    expiresAt + lock.CleanupGrace: when the document may go
//	<fences>/<DocID(key)>   fence       the key's counter: the fence of the last lease granted
//	                        key         the key, for inspection
//
// Fence counters carry no expireAt: nothing in this package, and no TTL
// policy on the lock collection, ever deletes them, so fences only grow,
// across release, expiry, cleanup and sweeps.
//
// # Operations and round trips
//
//	Acquire, free key      2: one read of both documents, then one write-only commit that
//	                       Creates the lock document and bumps the counter with a server-side
//	                       increment conditioned on the update time read; contenders fail
//	                       fast (AlreadyExists) without waiting for document locks
//	Acquire, expired lease 1 read, then a read-write transaction (3) that reads both documents
//	                       again, judges liveness after its reads, and only then writes
//	Acquire, live lease    1 read; nothing written, no fence consumed
//	Release, Extend        2: the query by lock id, then a delete or update conditioned on the
//	                       document's update time (the ownership check and the write are one
//	                       atomic step; a document changed in between is read again)
//	ReleaseKey, ExtendKey  2: the same through the key's document, without the query
//	IsLocked, LookupKey    1 read;  LookupID 1 query
//
// Contention is a result: an acquire that loses a commit, or whose
// transaction meets contention that outlasts the client's retries, answers
// "locked", and [lock.Do] retries it. Other failures are [*idemkit.Error]
// values mapped from the gRPC status code (see [MapError]): Unavailable is
// ServiceUnavailable, DeadlineExceeded NetworkTimeout, PermissionDenied
// AuthFailed, ResourceExhausted RateLimited, and so on. Their messages
// never quote a document name (which would hold a key); the original
// status stays reachable through errors.As and status.FromError.
//
// A failed commit is an unknown outcome, settled by a read. The Firestore
// client retries a commit whose answer was lost (Unavailable), and the
// retry meets what the first try left: its own precondition fails, or,
// inside a transaction, the transaction has ended (InvalidArgument). So
// after a failed commit an acquire reads the lock document and returns the
// lease if it carries this call's lock id, an extend reports OK if the
// document holds the lease with the expiry it wrote, and a release reports
// OK if the lease is gone and was still live when the delete's answer came
// (expired otherwise: see [Locker.Release]). Only when the read shows the
// commit did not land is its error reported, and never as InvalidArgument
// (see [MapCommitError]).
//
// # Indexes
//
// LookupID, Release and Extend find a lock by its id with an equality query
// on the lockId field, and [Locker.Sweep] with a range query on expireAt.
// Both are served by Firestore's automatic single-field indexes, which
// exist in production and on the emulator for every field unless an
// exemption disables them; no composite index is needed. If a
// single-field exemption (or a database-wide setting) disables indexing
// of lockId in the lock collection, those operations fail with
// InvalidArgument (Firestore answers FailedPrecondition); clear the
// exemption with
//
//	gcloud firestore indexes fields update lockId --collection-group=idemkit_locks --clear-exemption
//
// A deployment that relies on a TTL policy alone and never calls Sweep may
// exempt expireAt from indexing, as Google advises for TTL fields.
//
// # Garbage collection
//
// An expired lock document stays until an acquire replaces it, IsLocked's
// optional cleanup ([WithCleanupInIsLocked]) deletes it, or it is
// collected. In production, let Firestore collect it with a TTL policy on
// expireAt for the lock collection group:
//
//	gcloud firestore fields ttls update expireAt --collection-group=idemkit_locks --enable-ttl
//
// (use your collection name if you changed it, and never put a TTL policy
// on the fence collection). Firestore deletes expired documents some time
// after expireAt (typically within a day, with no promise), and since
// expireAt trails expiresAt by [lock.CleanupGrace] and moves with every
// extend, it never deletes a live lease. The emulator does not apply TTL
// policies. Without a TTL policy, call [Locker.Sweep] now and then, or
// start [Locker.StartSweeper]: it deletes expired documents in batches,
// re-checking each in a transaction so that a lease taken or extended in
// the meantime is kept.
//
// # Time
//
// A Firestore transaction cannot compare a document with Firestore's own
// clock before it decides what to write (server timestamps are written,
// never compared), so the client's clock is the time authority
// ([lock.TimeClient], reported by Capabilities): every operation judges a
// lease by the clock of the process calling it, with the one liveness rule
// of every backend, live ⇔ now < expiresAt ([lock.Live]), and stamps
// acquiredAt and expiresAt from that clock (truncated to the microsecond
// Firestore keeps). Acquire and Extend return the expiry they stored, so
// holder and contenders judge by the same instant.
//
// Clients must therefore keep their clocks synchronised: run NTP (chrony,
// systemd-timesyncd, or the cloud provider's time service; on Google Cloud
// the metadata server is the NTP source). Aim for an offset within ±100 ms
// and alert beyond ±200 ms. A client whose clock runs ahead by d sees every
// lease expire d early and may take over a lease its holder still
// believes live; one whose clock runs behind keeps leases d too long. Keep
// the lock TTL far above any plausible skew (the default 10 s is), and
// rely on fences, not on time, for safety. Each locker compares its clock
// with the update time Firestore stamps on every write ([SkewMonitor]) and
// logs a warning, at most once a minute, when the two differ by more than
// the skew tolerance ([WithSkewTolerance], default [DefaultSkewTolerance],
// 500 ms); [Locker.Skew] reports the last measurement.
//
// # Building blocks
//
// [MapError], [DocID], [CheckCollection], [Text], [FromText], [Micro],
// [DecodeFence] and [SkewMonitor] are exported for store/firestorestore,
// which keeps its records beside the locks with the same encoding and
// error mapping.
package firestorelock
