// Package firestorestore is the Google Cloud Firestore (Native mode)
// engine of idemkit, on cloud.google.com/go/firestore: a [store.Store]
// whose records carry their own lease, a [store.Stepper] (a claim's
// recovery points, carried over to the claim that takes over from it), a
// [store.Watcher] (snapshot listeners wake waiting duplicates and lock
// waiters), a [store.Records] (for
// [github.com/idemkit/idemkit/middleware.Compose]) and a lock-id finder
// ([Store.FindClaim]), so it serves the guard
// ([github.com/idemkit/idemkit/middleware]) and the lock library
// ([github.com/idemkit/idemkit/lock]) alike. It passes the conformance
// suites on Google's Firestore emulator.
//
//	client, _ := firestore.NewClient(ctx, "my-project")
//	records, _ := firestorestore.New(client)
//	guard, _ := middleware.New(records)   // idempotent requests
//	locks, _ := lock.New(records)         // distributed locks
//
// One document per record ([WithCollection]). Firestore's clock is the
// only clock: a lifetime runs from its write's commit time and is judged
// by the read time Firestore reports. Fences follow [store.Store]'s rule
// ([WithMaxClockStep]). Writes are single-document commits conditioned on
// the document being as last seen, so a contender fails fast instead of
// waiting on document locks: a replay is one RPC, a first execution three,
// and each step it records one more. A claim's steps are a map field of
// its document, one entry per step, absent when it has none. Expired
// documents are deleted by a TTL policy on expireAt or by [Store.Sweep].
// Layout, RPCs, indexes, sizes, production setup and error codes:
// docs/backends.md, "Firestore".
package firestorestore
