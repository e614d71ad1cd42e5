// Package firestorestore is the guard's backend on Google Cloud Firestore
// (Native mode), built on cloud.google.com/go/firestore: a [store.Store]
// whose records carry their own lease, so that one conditional write
// decides everything, a [store.Watcher] (a duplicate request waiting for
// a running one is woken by a snapshot listener when its outcome is
// written), and a [store.Records] (plain fenced records, for
// [github.com/idemkit/idemkit/middleware.Compose]). It passes the conformance suites in
// [github.com/idemkit/idemkit/store/storetest] on Google's Firestore
// emulator.
//
//	client, _ := firestore.NewClient(ctx, "my-project")
//	records, _ := firestorestore.New(client)
//	guard, _ := middleware.New(records)
//
// # Layout
//
// One document per record, in one collection ([WithCollection], default
// "idemkit_records"). The document id is the record key itself when
// Firestore can hold it as an id and an operator can read it (valid UTF-8
// of at most 1,500 bytes, without "/" or control characters, neither "."
// nor "..", not of Firestore's reserved form "__...__", and not starting
// with "#sha256:"); any other key gets "#sha256:" and the unpadded
// base64url SHA-256 of the key. So a guard's key reads as it is
// ("idempotency:<key>"), any key works ("/", ".", "__x__", 1 KiB keys,
// bytes that are not UTF-8), every document sits in the collection itself
// (a "/" never makes a sub-collection), and distinct keys never share a
// document. Record keys are taken as they are, never normalised.
//
// The fields:
//
//	key          the record key: a string, or bytes when it is not valid UTF-8
//	fingerprint  the request's fingerprint (a string, or bytes)
//	state        0 released or deleted (a tombstone), 1 claimed, 2 completed, 3 not replayable
//	response     the encoded response (bytes; empty but for a completed outcome, or a not-replayable one given a response, as store.Seal gives)
//	fence        the fence of the claim (an integer)
//	ttlMicros    the lease or record lifetime, in microseconds, from the document's update time
//	createdAt    only on an extended claim: when it was made (else the update time is)
//	expireAt     when the document may be deleted: the field of the TTL policy
//	writeId      a random id of the write that last changed the document
//
// # Time
//
// Firestore's clock is the only clock: the store has no clock of its own
// and never reads the client's wall clock. Every write that sets a record's
// lifetime (a claim, an extension, an outcome) sets ttlMicros, and the
// lifetime runs from that write's commit time, which Firestore keeps as the
// document's update time: a record expires at update time + ttlMicros. It
// is judged live against the read time Firestore reports with each read.
// So a claim's CreatedAt is the commit time of its write and its ExpiresAt
// that plus the lease, exactly as every node reads them, and a node whose
// clock is off cannot take over a live claim or keep one alive. (Copying
// documents by export and import resets their update times, and so
// their leases and lifetimes.)
//
// expireAt, which no operation judges, is written before the commit time is
// known: it is estimated from Firestore's time as last read (plus the time
// elapsed since by the local monotonic clock, which never runs ahead of
// it) and padded by a second, and it is never before the fence read as
// Unix milliseconds, so that a document is kept at least as long as its
// record must be (see [store.Store]).
//
// # Operations and round trips
//
// Reads are BatchGetDocuments outside any transaction (no document locks);
// writes are single-document commits conditioned on the document being as
// the store last saw it: a Create for a document that did not exist, else
// an update conditioned on its update time. No operation uses a
// transaction, so a contender never waits on document locks: a conditional
// write that loses fails fast (AlreadyExists or FailedPrecondition) and the
// loser reads again.
//
//	Claim, a replay or a busy key     1 read
//	Claim of a free key               1 read + 1 commit (Create)
//	Claim that takes over             1 read + 1 commit (a run-out claim, an expired outcome or a tombstone)
//	Extend, Complete, Release         1 commit, for a claim this store made
//	                                  (else, or when the document changed since: 1 read + 1 commit)
//	Get                               1 read
//	Delete, Put                       1 read + 1 commit
//	Watch                             the first watch of a key opens a Listen stream; others none
//
// A guard's replay is one RPC, its first execution three: the claim's read
// and Create, and the completion's commit, conditioned on the update time
// of the claim's write (the store remembers, in a bounded in-process map,
// the update times of the claims it made and still holds).
//
// A refused claim writes nothing. A new claim's fence is max(the fence the
// document carried (0 for none) + 1, the read time in Unix milliseconds),
// so it is greater than any fence the key's record ever carried: Release
// and Delete leave a tombstone (the fence alone, invisible to Get,
// claimable) whose expireAt is when Firestore's clock passes the fence, and
// nothing removes a document before its expireAt.
//
// A failed commit is an unknown outcome: the client retries a commit whose
// answer was lost (Unavailable), and the retry fails its own precondition.
// Every write carries a fresh write id, and one read settles the outcome:
// the write landed when the document carries one of the call's write ids.
// A commit that a read shows did not land is reported as ServiceUnavailable
// (transient), never as a configuration error.
//
// # Waiting duplicates
//
// A duplicate that finds the request running waits for its outcome. The
// store is a [store.Watcher]: the guard watches the record after its
// first busy answer, and a snapshot listener on the record document
// (a Listen stream on the client's gRPC connection) wakes it when the
// claim ends, so it reads the record at once instead of at its next poll.
// Nothing is added to the claim and completion: the listener sees the
// outcome's own commit.
//
// One listener per watched key, shared by every watch of the key in the
// process: a thousand duplicates waiting on one key use one listener, and
// duplicates waiting on k keys use k of them, however many there are. A
// key's first watch starts its listener and returns once the listener has
// delivered its first snapshot (the watch is then in place); its last
// watch stops it. The watches of a key close when a snapshot shows that
// the claim the listener last saw has ended (an outcome, a release or a
// delete, or a claim with another fence), and when that claim's lease
// runs out without an extension (by the read time of the snapshot), since
// a duplicate can then take it over; an extension wakes nobody. Every
// change of a watched record reaches each process listening to it, the
// outcome with its response: about what one more read of it costs.
//
// A notification can be late or lost, and the guard still polls, with its
// back-off, as a fallback. The client reopens a Listen stream that broke
// and resumes it where it was, so a change made meanwhile arrives when
// the stream is back. A listener that fails for good (the client gives
// up, the stream is refused) wakes its watches once and ends; the woken
// duplicates read the record and, still waiting, watch again on a new
// listener. A watch whose listener cannot deliver its first snapshot
// within the guard's op timeout is not set up, and that duplicate polls.
//
// Each running listener holds a stream of the client's connection, and
// a connection carries a bounded number of concurrent streams.
// [WithMaxListeners] bounds the listeners a store runs at once (default
// 50); a duplicate waiting on a further key polls.
//
// # Size
//
// A Firestore document holds at most 1 MiB (1,048,576 bytes), counted as
// Firestore counts storage size: the document name (collection id and
// document id), each field's name and value, and 32 bytes. Complete and Put
// count the record document the same way and refuse, before any I/O, a
// response that would bring it within 1 KiB of the limit, with an error
// matching [store.ErrTooLarge]; the guard then records the execution as not
// replayable. So the largest response depends on the key and fingerprint
// (and the collection name): with the defaults, a guard's record under a
// short key holds a response of up to about 1,047,200 bytes. Should
// Firestore still refuse a large document as invalid, and a read show that
// the write did not land, that is reported as [store.ErrTooLarge] too.
// [WithMaxResponseBytes] sets a lower limit of your own.
//
// # Expiry and garbage collection
//
// Expired records are invisible at once and deleted later; every document
// carries expireAt. In production, enable a Firestore TTL policy on it,
// and Firestore deletes expired documents itself (typically within a day
// of their expireAt):
//
//	gcloud firestore fields ttls update expireAt --collection-group=idemkit_records --enable-ttl
//
// (with your collection's name if you changed it). Without a TTL policy,
// run [Store.Sweep] now and then, or a background [Store.StartSweeper]: it
// queries expireAt in order and deletes, each conditioned on the update
// time it read, the documents whose expireAt has passed by the query's
// read time and whose record may go (see [Store.Sweep]).
//
// # Indexes
//
// No composite index is needed. Sweep needs the automatic single-field
// index on expireAt, and [Store.List] (operators listing the records under
// a prefix) the one on key (keep them if you tune index exemptions). The response
// field is never queried; exempting it from indexing saves index storage
// and write cost:
//
//	gcloud firestore indexes fields update response --collection-group=idemkit_records --disable-indexes
//
// # Errors
//
// Failures are [idemkit.Error] values that unwrap to their code's sentinel
// and the native error, mapped by gRPC status code and error type, never by
// message text: Unavailable, Internal and a closed client are
// ServiceUnavailable; DeadlineExceeded is NetworkTimeout; ResourceExhausted
// (quota) RateLimited; PermissionDenied and Unauthenticated AuthFailed;
// InvalidArgument InvalidArgument; FailedPrecondition (a missing index, a
// database in Datastore mode) and NotFound (no such database)
// Misconfigured; conditional writes that kept losing to
// concurrent ones ServiceUnavailable; an ended ctx is Aborted or
// NetworkTimeout. Every call runs under the caller's ctx, whose deadline
// bounds the client's own retries: a stalled Firestore is a coded error by
// the deadline, never a hang. Status messages, which can quote a document
// name and so a key, never reach the error text. A document this package
// did not write (a missing or mistyped field, a key that does not match
// its id) makes every operation that reads it fail with Internal; it is
// never overwritten.
package firestorestore
