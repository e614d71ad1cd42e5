// Package redislock is a [lock.Locker] (and [lock.KeyedLocker]) on Redis:
// a single node, Sentinel (a failover client) or Redis Cluster, through any
// [redis.UniversalClient] of go-redis v9. It passes the conformance suite in
// [github.com/idemkit/idemkit/lock/locktest] on a single node and on a
// 3-master cluster.
//
//	l, err := redislock.New(client)
//	err = lock.Do(ctx, l, "invoice:42", func(ctx context.Context, lease lock.Lease) error {
//		return issueInvoice(ctx, lease.Fence)
//	})
//
// Every operation is one atomic Lua script (run by SHA, EVAL when the server
// lacks it) that judges liveness by the Redis server's clock (TIME, in
// milliseconds): a lease is live while now < its expiry, as [lock.Live]
// says. Scripts touch only keys of one hash slot, all declared in KEYS.
//
// # Key layout
//
// Every name has the form
//
//	<prefix>:{<tag>}:<kind>:<part>
//
// with the prefix (default "idemkit"; no braces), a hash tag, a kind letter
// and the storage form of the key. The hash tag puts all names of one key on
// one cluster slot:
//
//	<prefix>:{<tag>}:l:<part>   the lock record: id, fence, acquired-at and expires-at
//	                            (15 digits each, ms), then the normalised key; PXAT its expiry
//	<prefix>:{<tag>}:f:<part>   the fence counter: an integer, no TTL, never deleted
//	<prefix>:{<tag>}:r:<part>   a co-located store's record (redisstore)
//	<prefix>:{<id>}:i           the index hint of lock id <id>: the lock record's name
//
// The tag of a key ([Tag]) is the key's own Redis hash tag when it has one
// (the content of its first "{...}", as Redis defines it), so that the
// guard's "<ns>:lock:{X}" and "<ns>:record:{X}" land on one slot and a store
// can take the lock and read the record in one script; otherwise it is a
// digest of the key, which spreads keys over the slots. The part is
// [lock.StorageKey] of the key: "k:" and the key itself when it is printable
// ASCII without braces, else "h:" and its SHA-256. So names are injective: a
// kind letter follows the tag, and the whole key (or its hash) follows the
// kind, so no user key can ever name another key's lock, fence counter or
// record, or an index hint, whatever bytes it holds.
//
// # Operations and round trips
//
//	Acquire      1 script (lock record, fence counter, index hint); on a cluster, where the
//	             hint lives on its id's slot, a successful acquire writes it with a second command
//	ReleaseKey   1 script on the lock's slot (id and liveness checked atomically)
//	ExtendKey    1 script, pipelined with a refresh of the hint's TTL (PEXPIRE ... GT)
//	Release, Extend, LookupID
//	             2: GET the index hint, then the script on the lock's slot, which checks
//	             the id and liveness itself (the hint is never trusted)
//	IsLocked, LookupKey
//	             1 script
//
// An acquire checks liveness, then the fence counter: past [lock.FenceMax]
// it refuses before writing anything (the counter is unchanged). A refused
// attempt (contention or overflow) writes nothing at all, so waiters cost
// the server no disk writes. An acquire run twice
// with the same id (go-redis retrying a script whose reply was lost) gets the
// same lease back. Fences above [lock.FenceWarn] are logged, with the key
// hashed.
//
// Redis deletes a lock record itself at its expiry (PXAT), so a release or
// extend after the expiry usually reports [lock.ReasonNotFound];
// [lock.ReasonExpired] only when the record is still there. IsLocked's
// optional cleanup ([WithCleanupInIsLocked]) deletes only records expired
// more than [lock.CleanupGrace] ago, never the fence counter.
//
// Index hints are written with the lease's TTL (plus a second) and only
// ever lengthened; a hint that outlives its lease is harmless. Redis 7.0 or
// later is required (SET ... PXAT, PEXPIRE ... GT).
//
// # Cluster
//
// A *redis.ClusterClient works as it is: every script stays on the lock's
// slot, and only the index hint (on its id's slot) travels separately,
// after the acquire succeeded: a successful acquire costs two round trips
// on a cluster, one elsewhere. A
// plain client on a cluster-mode endpoint (a proxy, a one-shard cluster)
// meets CROSSSLOT on its first acquire; the locker then switches to the
// cluster layout of its commands for good and retries.
//
// # Fence durability
//
// A fence must never be issued twice, so the increment must survive a crash
// and a failover. That takes AOF with appendfsync always (every write is on
// disk before the reply), or a wait for replicas: with [WithWaitForReplicas]
// the acquire waits (WAIT) until n replicas acknowledged the write before it
// hands out the lease, and gives the lease back if they did not;
// [WithWaitForAOF] does the same with WAITAOF (Redis 7.2+), for servers on
// appendfsync everysec. With RDB snapshots only, with appendfsync everysec
// and no wait, or with asynchronous replication and a failover, the last
// increments can be lost and a fence reissued after a restart: fencing is
// then only as strong as the persistence.
//
// # Errors
//
// Failures are [*idemkit.Error] values that unwrap to their code's sentinel and
// to go-redis's error; see [MapError] for the mapping. Contention, absence
// and ownership mismatches are results, never errors.
//
// # Building a co-located store
//
// [Lua], [NewScript], [Layout], [Locker.AcquireWith], [Locker.ReleaseWith],
// [Locker.SameLocks] and [MapError] are the building blocks of a store that
// keeps its records on the locks' slots and folds lock operations into its
// own scripts (see [github.com/idemkit/idemkit/store/redisstore]): the lock
// semantics stay in this package, written once.
package redislock
