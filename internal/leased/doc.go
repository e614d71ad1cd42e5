// Package leased holds the rules of the [store.Store] contract that the
// stores of this module share: the argument checks every operation makes
// before any I/O, the error of a response too large for a store, the fence
// of a new claim ([NextFence]) and how long a record must be kept
// ([KeepUntil]).
//
// memstore uses it, and the conformance suite's own tests. The store
// package cannot import it (it imports store) and keeps its own argument
// checks for [store.Compose]; the stores in modules of their own keep theirs
// too, since released code outside this module never imports internal
// packages. The contract values themselves ([store.MaxKeyBytes],
// [store.ClaimRetention], [store.ErrTooLarge]) stay in store, where users
// and other backends read them.
package leased
