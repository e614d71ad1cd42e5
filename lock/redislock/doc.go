// Package redislock is a [lock.Locker] (and [lock.KeyedLocker] and
// [lock.Watcher]) on Redis: a single node, Sentinel (a failover client) or
// Redis Cluster, through any [redis.UniversalClient] of go-redis v9 built
// with ContextTimeoutEnabled. It passes the conformance suite in
// [github.com/idemkit/idemkit/lock/locktest] on a single node and on a
// 3-master cluster. Redis 7.0 or later is required (SET ... PXAT, PEXPIREAT
// ... GT, sharded pub/sub).
//
//	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
//	l, err := redislock.New(client)
//	err = lock.Do(ctx, l, "invoice:42", func(ctx context.Context, lease lock.Lease) error {
//		return issueInvoice(ctx, lease.Fence)
//	})
//
// Every operation is one atomic Lua script (run by SHA, EVAL when the server
// lacks it) that judges liveness by the Redis server's clock (TIME, in
// milliseconds): a lease is live while now < its expiry, as [lock.Live]
// says. Every call runs under the caller's ctx: a stalled server gives
// NetworkTimeout at the ctx deadline, not a hang.
//
// A waiter of [lock.Do] is woken as soon as the lock is released, by Redis
// pub/sub (see Notifications below), and the waiters of one Locker take
// the lock in turn.
//
// # Key layout
//
//	<prefix>:{<tag>}:l:<part>   the lock record of a key: lock id, fence, acquired-at and
//	                            expires-at (15 digits each; times in ms), then the key;
//	                            it expires at the later of its expiry and its fence + 1 ms
//	<prefix>:{<id>}:i           with WithIDIndex only: the index hint of a lock id, the
//	                            name of its lock record; PXAT the lease's expiry + 1 s,
//	                            lengthened by extends, deleted by releases
//
// The prefix is [WithKeyPrefix]'s ("idemkit" by default). The part is "k:"
// and the key itself when it is printable ASCII without braces, else "h:"
// and the key's SHA-256 (unpadded base64url), so that no two keys share a
// record whatever bytes they hold. The hash tag keeps a lock record and
// nothing else on its slot: it is the key's own Redis hash tag when it has
// one (so an application can choose where its locks live), else 16
// characters of the key's SHA-256, which spreads keys over the slots. The
// hint's tag is the lock id. The notification channel of a key is named
// like its lock record (the channel namespace is apart from the keys).
//
// Every key has an expiry; nothing grows without bound.
//
// # Fences
//
// A new lease's fence is max(the previous fence + 1, the server's clock in
// Unix ms), the previous fence being the one the key's record carries:
// 15-digit decimals, about 1.8e12 today, far below [lock.FenceMax]. There is
// no counter. Instead no record is removed before the server's clock has
// passed its fence: a release (or IsLocked's cleanup, [WithCleanupInIsLocked])
// deletes the record when the clock is past the fence, and otherwise leaves
// a tombstone (the fence alone, under a lock id no lease can have: not
// live, found by no id, acquirable) that expires as soon as the clock
// passes it; a lease that runs out is removed by Redis at the later of its
// expiry and its fence + 1 ms. So after a release, an expiry or a restart,
// the next fence is greater than every fence the key had, and a fence
// raised ahead of the clock survives too.
//
// This relies on the clock of the master holding a key not stepping back
// (run NTP, which slews), and after a failover on the new master's clock not
// being behind the old one's by more than the failover took.
//
// A refused attempt (contention, a fence past [lock.FenceMax]) writes
// nothing, so waiters cost the server no disk writes. An acquire run twice
// with the same lock id (go-redis retrying a script whose reply was lost)
// gets the same lease back. Release and extend of a lease that ran out
// report [lock.ReasonExpired] while its record is still there, and
// [lock.ReasonNotFound] once Redis removed it.
//
// # Operations and round trips
//
//	Acquire      1 script: TIME, then SET ... NX on a key with no record (the fence is
//	             the clock), or the record decides; with WithIDIndex it also writes the
//	             index hint on a single node, and on a cluster (where the hint lives on
//	             its id's slot) a successful acquire writes it with a second command
//	ReleaseKey   1 script: the id and liveness checked atomically, the record deleted
//	             (or left as a tombstone), the watchers notified (PUBLISH)
//	ExtendKey    1 script (with WithIDIndex on a cluster, pipelined with the hint's
//	             PEXPIRE ... GT)
//	Release, Extend, LookupID
//	             1 script for a lease this Locker issued (its lock id resolves from
//	             memory); for another id 2: GET the index hint, then the script on the
//	             lock record, which checks the id and liveness itself (the hint is never
//	             trusted)
//	IsLocked, LookupKey
//	             1 script
//
// [lock.Do] releases and extends by key: one round trip each.
//
// # Lock ids across processes
//
// By default a Locker writes nothing but the lock record: a lease's lock id
// is stored in the record, and the Locker that issued the lease finds its
// record from the id in memory. Another process cannot find the record of
// that id: its Release, Extend and LookupID by the id report not found.
// When lock ids travel between processes (one acquires, another releases
// by id), build the acquiring Lockers with [WithIDIndex]: every acquire
// then also writes the id's index hint (a write more per acquire, and a
// delete per release), through which any Locker resolves the id. Releases
// and extends by key ([lock.Do], [lock.Handle], ReleaseKey, ExtendKey)
// never need it.
//
// # Notifications
//
// [Locker.Watch] implements [lock.Watcher], which [lock.Do] uses to wake a
// waiter as soon as the lock may be free instead of at its next poll.
// Every script that ends a lease (a release; a release or extend that finds
// the lease expired; IsLocked's cleanup) publishes the lease's lock id on
// the key's channel in the same script: no round trip of its own, and a
// message nobody listens to costs the server a dictionary lookup. On a
// cluster client the message is sharded (SPUBLISH) and stays on the
// record's shard. A lease that runs out publishes nothing (Redis expires
// it silently): waiters then find it free at their next poll.
//
// A Locker listens on one pub/sub connection (on a cluster, one per master
// holding a watched key), started by the first Watch and shared by every
// watch: one subscription per watched key, whatever the number of waiters.
// A subscription no watch has needed for 5 s is dropped, and the
// connection is closed after 30 s without any. When the connection fails
// (it is pinged after 3 s of silence), every watch is woken once, since
// messages may have been lost, and the next Watch connects again (after a
// pause growing to 5 s while the server refuses the connection or the
// subscription); meanwhile waiters poll with their back-off. Only
// *redis.Client and *redis.ClusterClient can listen; with other clients
// waiters poll.
//
// The waiters of one Locker on one key wait in line, oldest first. A
// release wakes the oldest alone (the others could only be refused), and
// for a moment other acquires of the key through the Locker wait for its
// try, so that a goroutine that releases and acquires again at once does
// not overtake the line: the lock is fair within a process, and a hot key's
// waiters do not all reach for the server at every release. Across
// processes, each Locker's oldest waiter races the others'.
//
// # Cluster
//
// A *redis.ClusterClient works as it is: every script touches one lock
// record, and only the index hint (with WithIDIndex) travels separately. A
// plain client on a cluster-mode endpoint (a proxy, a one-shard cluster)
// meets CROSSSLOT on its first acquire with the index; the locker then
// writes the hint separately for good, and retries.
//
// # Durability
//
// A lease is as durable as the server's persistence. With asynchronous
// replication and a failover, or appendfsync everysec and a crash, the last
// writes can be lost: a lease's record with them, so that another process
// can take a lock that is still held. Fences stay monotonic even then (a
// new fence is at least the new master's clock), barring the clock caveats
// above. [WithWaitForReplicas] makes an acquire wait (WAIT) until n replicas
// acknowledged the lease before handing it out, and gives the lease back if
// they did not; [WithWaitForAOF] does the same with WAITAOF (Redis 7.2+).
//
// # Errors
//
// Failures are [*idemkit.Error] values that unwrap to their code's sentinel
// and to go-redis's error. Native errors are mapped by type, and server
// error replies by their error code, never by message text:
//
//	context.Canceled                              Aborted
//	context.DeadlineExceeded, a net.Error timeout NetworkTimeout
//	redis.ErrClosed, pool timeout or exhaustion,
//	  EOF, refused, reset, broken pipe, dial      ServiceUnavailable
//	LOADING READONLY MASTERDOWN CLUSTERDOWN
//	  TRYAGAIN MOVED ASK BUSY NOREPLICAS MISCONF  ServiceUnavailable
//	NOAUTH WRONGPASS NOPERM                       AuthFailed
//	OOM (out of memory), max number of clients    RateLimited
//	anything else (WRONGTYPE, NOSCRIPT, CROSSSLOT,
//	  a script error, a malformed record)         Internal
//
// Contention, absence and ownership mismatches are results, never errors.
//
// # Upgrading from fence counters
//
// Earlier versions kept a fence counter with no expiry beside every lock
// record, named <prefix>:{<tag>}:f:<part>. This version never reads or
// writes them: delete them at leisure, for example
//
//	redis-cli --scan --pattern 'idemkit:{*}:f:*' | while IFS= read -r k; do redis-cli unlink "$k"; done
//
// (on a cluster, on every master). Fences stay monotonic across the upgrade:
// a new fence is at least the server's clock in milliseconds, far above any
// counter. Lock records and index hints keep their names and form, so
// processes of both versions exclude each other during a rolling upgrade;
// but a process of the earlier version still issues counter fences, lower
// than this version's, until it is replaced. Earlier versions wrote an
// index hint for every lease; this one does only with [WithIDIndex], which
// a deployment whose processes pass lock ids to each other should set
// before it upgrades.
package redislock
