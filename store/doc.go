// Package store is the record contract of idemkit: where the guard keeps
// the outcome of each execution so that retries get it back.
//
// A [Record] holds the record key, the request's fingerprint, a [State]
// (completed, or executed-not-replayable), the encoded response, the fence of
// the lease under which it was written, and its created and expiry times.
// [Store.Put] is fenced: it writes nothing when the stored record carries a
// higher fence, so a holder whose lease ran out can never overwrite the
// record of the holder that replaced it.
//
// Stores: [github.com/idemkit/idemkit/store/memstore] in this module, and
// Redis, PostgreSQL and Firestore stores in modules of their own. Every store
// passes the conformance suite in
// [github.com/idemkit/idemkit/store/storetest]. Errors use the lock layer's
// codes ([idemkit.Error]).
package store
