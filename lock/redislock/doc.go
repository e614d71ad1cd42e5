// Package redislock is a [lock.Locker] (and [lock.KeyedLocker] and
// [lock.Watcher]) on Redis: a single node, Sentinel (a failover client) or
// Redis Cluster, through any [redis.UniversalClient] of go-redis v9 built
// with ContextTimeoutEnabled. It passes the conformance suite in
// [github.com/idemkit/idemkit/lock/locktest] on a single node and on a
// 3-master cluster. Redis 7.0 or later is required (SET ... PXAT,
// PEXPIRETIME, PEXPIREAT ... GT, sharded pub/sub).
//
//	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
//	l, err := redislock.New(client)
//	err = lock.Do(ctx, l, "invoice:42", func(ctx context.Context, lease lock.Lease) error {
//		return issueInvoice(ctx, lease.Fence)
//	})
//
// Liveness is judged by the Redis server's clock, in milliseconds: a lease
// is live while now < its expiry, as [lock.Live] says. The common acquire,
// of a key without a record, is a SET ... NX PX pipelined with a
// PEXPIRETIME (one round trip, no script); everything else is one atomic
// Lua script (run by SHA, EVAL when the server lacks it). Every call runs
// under the caller's ctx: a stalled server gives NetworkTimeout at the ctx
// deadline, not a hang.
//
// A waiter of [lock.Do] is woken as soon as the lock is released, by Redis
// pub/sub (see Notifications below), and the waiters of one Locker take
// the lock in turn.
//
// # Key layout
//
//	<prefix>:l:k:<key>          the lock record of a printable key without braces
//	<prefix>:l:h:<sha>          the lock record of any other key without a hash tag
//	<prefix>:{<tag>}:l:h:<sha>  the lock record of a key with the Redis hash tag <tag>
//	<prefix>:{<id>}:i           with WithIDIndex only: the index hint of a lock id, the
//	                            name of its lock record; it expires 1 s after the lease,
//	                            is lengthened by extends, deleted by releases
//
// The prefix is [WithKeyPrefix]'s ("idemkit" by default); sha is the key's
// SHA-256 (unpadded base64url), so that no two keys share a record whatever
// bytes they hold. A key's own hash tag chooses its slot (so an
// application can choose where its locks live); other records spread over
// the slots by their whole name. The hint's tag is the lock id. The
// notification channel of a key is named like its lock record (the channel
// namespace is apart from the keys).
//
// A lock record is a string: the lock id (22 bytes), a kind, then what the
// kind holds (numbers in 15 zero-padded digits, times in Unix ms):
//
//	c  a lease as an acquire of a free key writes it: its TTL, then the key
//	   (left out when the record's name spells it). The record expires with
//	   the lease, and the lease's fence and acquired-at are its expiry less
//	   the TTL: the server's clock at the SET.
//	f  a lease written by an acquire over an existing record, or by an
//	   extend: fence, acquired-at, expires-at, then the key. It expires at
//	   the later of its expiry and its fence + 1 ms.
//	t  a tombstone (its id is 22 dots, which no lock id is): the fence
//	   alone, until the clock passes it.
//	r  a light tombstone: a c lease released when its fence's
//	   millisecond may not have passed becomes one for 1 ms.
//
// The lease kinds in upper case (C, F) are watched: see Notifications. Every
// key has an expiry; nothing grows without bound.
//
// # Fences
//
// A new lease's fence is max(the previous fence + 1, the server's clock in
// Unix ms), the previous fence being the one the key's record carries:
// 15-digit decimals, about 1.8e12 today, far below [idemkit.FenceMax]. There is
// no counter. Instead no record is removed before the server's clock has
// passed its fence: a release (or IsLocked's cleanup, [WithCleanupInIsLocked])
// deletes the record when the clock is past the fence, and otherwise leaves
// a tombstone (not live, found by no id, acquirable) that expires as soon
// as the clock passes it; a lease that runs out is removed by Redis at the
// later of its expiry and its fence + 1 ms. So after a release, an expiry
// or a restart, the next fence is greater than every fence the key had,
// and a fence raised ahead of the clock survives too. A lease taking over a
// light tombstone gets the clock + 1: its released lease's fence was at
// most the clock.
//
// This relies on the clock of the master holding a key not stepping back
// (run NTP, which slews), and after a failover on the new master's clock not
// being behind the old one's by more than the failover took.
//
// A refused attempt (contention, a fence past [idemkit.FenceMax]) writes
// nothing but, when its Locker watches the key, the mark that makes the
// lease's end send a message. An acquire run twice with the same lock id
// (go-redis retrying after a lost reply) gets the same lease back. Release
// and extend of a lease that ran out report [lock.ReasonExpired] while its
// record is still there, and [lock.ReasonNotFound] once Redis removed it.
//
// # Operations and round trips
//
//	Acquire      a free key (no record): SET ... NX PX pipelined with PEXPIRETIME,
//	             1 round trip and no script (when the answer takes half the TTL or
//	             more, the acquire script reads the lease back: a second); a key with
//	             a record: the acquire script, a second round trip that decides by
//	             the record (TIME, then a take-over or nothing). The script goes
//	             first, alone, when the Locker watches the key (its waiters expect a
//	             record) or has just left it as a tombstone, and with WithIDIndex on
//	             a single node (or Sentinel), where it also writes the index hint; on
//	             a cluster (where the hint lives on its id's slot) a successful
//	             acquire writes the hint with a command of its own
//	ReleaseKey   1 script: the id checked and the record deleted, the watchers
//	             notified (PUBLISH) if any wait. For a lease this Locker granted,
//	             a GET and a DEL when it was granted over 2 ms ago, else a GET and
//	             a light tombstone; for another, a PTTL tells whether the fence's
//	             millisecond has passed (a tombstone if not). The record of an
//	             unwatched compact lease this Locker wrote is compared whole, not
//	             decoded
//	ExtendKey    1 script (with WithIDIndex on a cluster, pipelined with the hint's
//	             PEXPIRE ... GT)
//	with WithWaitForReplicas or WithWaitForAOF, on a dedicated connection to the lock's master:
//	Acquire      as above, then WAIT (WAITAOF): a round trip more, plus the
//	             replication delay
//	ExtendKey    the script pipelined with WAIT (WAITAOF): 1 round trip, plus the
//	             replication delay (with WithIDIndex on a cluster, the hint's PEXPIRE
//	             ... GT follows: 2)
//	Release, Extend, LookupID
//	             as by key for a lease this Locker issued (its lock id resolves from
//	             memory); for another id 1 more: GET the index hint, then the script
//	             on the lock record, which checks the id and liveness itself (the
//	             hint is never trusted)
//	IsLocked, LookupKey
//	             1 script
//
// [lock.Do] releases and extends by key: one round trip each.
//
// Under load, acquires and releases share round trips: while
// [WithMaxInflight] of them (default 4) are in flight on the client, the
// commands of further calls queue, and the next round trip that comes
// back takes all of them along in one pipeline. Redis spends most of a
// small command's time reading and writing sockets, so a busy Locker gets
// many calls answered per socket read and write; a lone call still sends
// its commands at once. Each call gets its own replies. A call whose ctx
// ends while queued returns at once, and its commands are not sent
// unless they already went out (as when a reply is lost: a lease it may
// have been granted runs out by its TTL).
//
// Behind a proxy that refuses the acquire's pipeline (it lacks PEXPIRETIME)
// but runs scripts, the first acquire falls back to the script (which finds
// the lease its SET wrote), and every later one uses the script alone.
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
// waiter as soon as the lock may be free instead of at its next poll. A
// lease whose end some Locker waits for is marked watched: a Watch marks
// the lease it finds, an acquire refused while its Locker watches the key
// marks the lease that refused it, an acquire through a watching Locker
// writes its own lease watched, and extends and take-overs keep the mark.
// The script that ends a watched lease (a release; a release or extend
// that finds it expired) publishes its lock id on the key's channel in the
// same script, and so does IsLocked's cleanup: no round trip of its own. A
// lease nobody watches ends without a message, so the lock cycle of a key
// nobody waits for costs no PUBLISH. On a cluster client the message is
// sharded (SPUBLISH) and stays on the record's shard. A lease that runs out
// publishes nothing (Redis expires it silently), and a lease that takes over
// from one that ran out before anyone watched it is not marked: waiters
// then find the key free at their next poll, or at the next refused try,
// which marks the new lease.
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
// can take a lock that is still held; an extension with them, so that the
// lease runs out earlier than its holder was told. Fences stay monotonic
// even then (a new fence is at least the new master's clock), barring the
// clock caveats above.
//
// [WithWaitForReplicas] makes a write count only once n replicas
// acknowledged it (WAIT, on the connection that wrote): an acquire hands
// out its lease only then, and gives the lease back if they did not in
// time (ServiceUnavailable); an extend reports success only then, and
// ServiceUnavailable otherwise (the master keeps the extension, which a
// failover may lose; [lock.Do] retries its renewal, and cancels fn if no
// renewal succeeds before the lease's last acknowledged expiry). An
// acquire retried with the same lock id (go-redis retrying after a lost
// reply), which finds its own lease, writes the record's expiry again so
// that its WAIT covers the lease too. [WithWaitForAOF] does the same with
// WAITAOF (Redis 7.2+). So a failover to a replica that acknowledged loses
// no lease and shortens none; the failover tests kill masters under load
// and find no two holders of a key at once and no fence going back. While
// the new master has fewer replicas than asked for (until the old master
// rejoins as a replica), acquires and extends fail with
// ServiceUnavailable. On a cluster client an error on the dedicated
// connection makes the client reload its slot map, so that the next call
// reaches the new master. Without a wait a failover can lose leases: the
// failover tests measure how often.
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
package redislock
