// Package memstore is an in-process [store.Store] for tests and single-node
// services, with an injectable clock. It passes the conformance suite in
// [github.com/idemkit/idemkit/store/storetest].
package memstore
