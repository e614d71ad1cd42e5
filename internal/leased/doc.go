// Package leased holds two rules of the [store.Store] contract that the
// stores of this module share: the fence of a new claim ([NextFence]) and
// how long a record must be kept ([KeepUntil]).
//
// memstore uses it, and the conformance suite's own tests. The stores in
// modules of their own keep their copies, since released code outside
// this module never imports internal packages. The argument checks every
// store makes are [github.com/idemkit/idemkit/store/engine.ValidateKey] and its siblings.
package leased
