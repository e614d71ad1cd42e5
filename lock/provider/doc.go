// Package provider holds what lock providers share, for the authors of
// lock backends (memlock, redislock, pglock, firestorelock, and yours):
// the fence rule without counters ([NextFence], [KeepUntil], [CheckFence]),
// and the derivation of storage names from user keys ([StorageKey]); the
// background sweeper loop is store.SweepEvery. Users of locks never need it;
// the contract they program against is package lock.
//
// The fence rule: a new lease's fence is max(previous fence of the key's
// record or tombstone + 1, the backend's clock in Unix milliseconds), and
// no record is removed before [KeepUntil]: a release, cleanup or sweep
// before then leaves a tombstone carrying the fence. So fences grow
// across release, expiry, cleanup and restart, and nothing is kept
// without an expiry.
package provider
