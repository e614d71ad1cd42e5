// Package redisstore is a [store.Store] on Redis (a single node, Sentinel
// or Redis Cluster, through any [redis.UniversalClient] of go-redis v9) and
// a [store.Combiner] for the locks of
// [github.com/idemkit/idemkit/lock/redislock]. It passes the conformance
// suite in [github.com/idemkit/idemkit/store/storetest] on a single node and
// on a 3-master cluster.
//
//	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	locker, _ := redislock.New(client)
//	records, _ := redisstore.New(client)
//	guard, _ := middleware.New(records, locker)
//
// # Records
//
// A record lives at "<prefix>:{<tag>}:r:<part>", in redislock's layout (see
// its package documentation): the tag of the guard's record key
// "<ns>:record:{X}" is X, the tag of its lock key "<ns>:lock:{X}", so a
// key's record and lock share a cluster slot. Any bytes make a key. The
// record is a hash: the meta field (state, fence, created-at and expires-at
// in milliseconds), the fingerprint and the response. It expires by Redis's
// clock: PEXPIREAT deletes it, and every read judges it (visible while now <
// its expiry).
//
// Each operation is one Lua script: Get reads and judges expiry; Put
// compares the stored record's fence with the new one and writes (equal,
// lower or no live record) or refuses (a higher one) atomically; Delete
// reports whether a live record was there. Responses above the limit
// ([WithMaxResponseBytes], default 512 MiB, Redis's largest string) are
// refused with [store.ErrTooLarge] before any I/O.
//
// # Combining with the lock
//
// When the guard's locker is a [*redislock.Locker] on the same client with
// the same key prefix (and the same durability wait), [Store.Combines]
// reports true and the guard folds its lock operations into the store's
// scripts, built on redislock's Lua library so that the lock semantics exist
// once:
//
//	AcquireGet   redislock's acquire and a read of the record, one script on the key's slot
//	PutRelease   the fenced put and redislock's release (by key and id), one script
//
// A guarded request then costs one round trip when it replays (the record
// read) and three when it runs first (read; acquire and read; put and
// release) instead of five. On a cluster a successful acquire also writes
// the lock id's index hint, which lives on another slot (see redislock):
// one round trip more, four instead of six.
package redisstore
