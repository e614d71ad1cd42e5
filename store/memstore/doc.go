// Package memstore is an in-process backend for the guard: a [store.Store]
// whose records carry their own lease, and a [store.Records] (fenced plain
// records, for [store.Compose]). It is for tests and single-node services.
//
// Its clock can be injected ([WithClock]) so tests step across lease and
// expiry boundaries exactly; by default the process clock judges leases and
// expiry. Fences follow the contract without a counter: a new claim's fence
// is max(the key's previous fence + 1, the clock in Unix milliseconds), and
// a released, deleted or expired record keeps its fence until the clock has
// passed it (see [store.Store]). Expired entries are swept as the store
// works, at an amortised constant cost per write. The store is bounded in
// keys and bytes ([WithMaxEntries], [WithMaxBytes]): a full store sweeps at
// once and refuses what still does not fit.
//
// It passes the conformance suite in
// [github.com/idemkit/idemkit/store/storetest].
package memstore
