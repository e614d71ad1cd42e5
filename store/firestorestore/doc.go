// Package firestorestore is a [store.Store] on Google Cloud Firestore
// (Native mode), built on cloud.google.com/go/firestore and on the building
// blocks of [github.com/idemkit/idemkit/lock/firestorelock] (error mapping,
// document ids, collection names, the clock-skew monitor, the sweeper). It
// passes the conformance suite in
// [github.com/idemkit/idemkit/store/storetest] on Google's Firestore
// emulator. Pair it with firestorelock's locker in the guard:
//
//	client, _ := firestore.NewClient(ctx, "my-project")
//	locker, _ := firestorelock.New(client)
//	records, _ := firestorestore.New(client)
//	guard, _ := middleware.New(records, locker)
//
// # Layout
//
// One document per record, in one collection ([WithCollection], default
// "idemkit_records"; keep it apart from the locker's collections). The
// document id is [firestorelock.DocID] of the record key: "k:" and the key
// itself when Firestore can take it as an id (valid UTF-8 without "/", at
// most 1,500 bytes in all), else "h:" and its SHA-256 in base64url. So any
// key works — "/", ".", "..", "__x__", 1 KiB keys, any Unicode, bytes that
// are not UTF-8 — every document sits in the collection itself (a "/"
// never makes a sub-collection), and distinct keys never share a document.
// Record keys are taken as they are, never normalised.
//
// The fields ([FieldKey] and the others): key (a string, or bytes when the
// key is not valid UTF-8), fingerprint, state (an integer), response
// (bytes), fence (an integer), createdAt and expiresAt (timestamps),
// expireAt = expiresAt + [lock.CleanupGrace], the time from which the
// document may be deleted, and writeId, a random id of the Put that wrote
// the record (see below).
//
// # Time
//
// A Firestore read or write cannot be conditioned on the server's clock,
// so the client's clock is the time authority, as for
// firestorelock's locks: it stamps createdAt and expiresAt, and a record is
// visible while the client clock is before its expiresAt (the one liveness
// rule of every backend, [lock.Live]). Keep the clocks of every node
// synchronised (NTP): a node whose clock runs ahead sees records expire
// early, one whose clock runs behind sees them late. Each Put compares the
// client clock with the commit time Firestore reports and logs a warning
// when they differ by more than a tolerance ([WithSkewTolerance], default
// 500 ms); [Store.Skew] returns the last measurement. With record TTLs of
// hours, a skew of a second matters little; the locks' TTLs of seconds are
// what the NTP advice protects.
//
// # Operations
//
// Get is one read, outside any transaction. Put is one read-write
// transaction (begin, read, commit): it reads the document and writes the
// whole record unless the stored record is live and carries a higher
// fence, exactly the contract of [store.Store]. Delete is one read-write
// transaction too, so that it can report whether a live record was there.
// A transaction that Firestore aborts for contention (another transaction
// on the same document: concurrent Puts of one key, which the guard does
// not issue, or a sweep) is retried by the client up to
// [WithTransactionAttempts] times, then reported as ServiceUnavailable
// whose cause is the Aborted status.
//
// A failed commit is an unknown outcome, settled by a read. The Firestore
// client retries a commit whose answer was lost (Unavailable), and the
// retry of a transaction that has already committed fails with
// InvalidArgument ("the transaction is invalid or closed"). So when a
// transaction that got as far as its write fails, Put reads the document
// back and answers true if it carries this call's write id, and Delete
// answers what its transaction saw if the document is gone. Only when the
// read shows the commit did not land is the failure reported, and an
// InvalidArgument then is transient (ServiceUnavailable, see
// [firestorelock.MapCommitError]), never a configuration error.
//
// # Size
//
// A Firestore document holds at most 1 MiB ([MaxDocumentBytes]), counted
// as Firestore counts storage size: the document name (collection id and
// document id), each field's name and value, and 32 bytes. Put counts the
// record document the same way and refuses, before any I/O, a response
// that would bring it within [DocumentMargin] (1 KiB) of the limit, with
// an error matching [store.ErrTooLarge]; the guard then records the
// execution as not replayable, and retries are told so rather than run the
// work again. [Store.MaxResponseBytes] tells the limit for a key; with the
// defaults, a guard's record under a short key holds a response of up to
// about 1,047,200 bytes. Should Firestore still refuse a large document
// (over half the limit) as InvalidArgument, and the read that settles the
// commit show that it did not land, Put reports that as [store.ErrTooLarge]
// too.
// [WithMaxResponseBytes] sets a lower limit of your own.
//
// # Expiry and garbage collection
//
// Expired records are invisible at once and deleted later. In production,
// enable a Firestore TTL policy on expireAt, and Firestore deletes expired
// documents itself, typically within 24 hours of their expireAt (by
// Google's clock; expireAt trails expiresAt by [lock.CleanupGrace], so a
// client clock running a little behind never sees a live record vanish):
//
//	gcloud firestore fields ttls update expireAt --collection-group=idemkit_records --enable-ttl
//
// (with your collection's name if you changed it). Without a TTL policy,
// run [Store.Sweep] now and then, or a background [Store.StartSweeper]: it
// queries expireAt through Firestore's automatic single-field index and
// deletes expired documents in batches, each batch one transaction that
// checks expiry again.
//
// # Indexes
//
// No composite index is needed. Sweep needs the automatic single-field
// index on expireAt (keep it if you tune index exemptions). The response
// field is never queried; exempting it from indexing saves index storage
// and write cost:
//
//	gcloud firestore indexes fields update response --collection-group=idemkit_records --disable-indexes
//
// # Errors
//
// Failures are [idemkit.Error] values that unwrap to their code's sentinel and
// the native error, mapped by gRPC status code and error type by
// [firestorelock.MapError] (see its table): Unavailable and a closed client
// are ServiceUnavailable, contention that outlasted the retries (Aborted)
// ServiceUnavailable, DeadlineExceeded NetworkTimeout, ResourceExhausted
// RateLimited, PermissionDenied and Unauthenticated AuthFailed; an ended
// ctx is Aborted or NetworkTimeout. Status messages, which can quote a
// document name and so a key, never reach the error text. A document this
// package did not write (a missing or mistyped field, a key that does not
// match its id) makes Get and Put fail with Internal; Put never overwrites
// it (Delete, asked to remove the key's record, does remove it).
package firestorestore
