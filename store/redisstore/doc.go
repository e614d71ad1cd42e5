// Package redisstore is the guard's backend on Redis: a [store.Store] whose
// records carry their own lease, on a single node, through Sentinel (a
// failover client) or on Redis Cluster, through any [redis.UniversalClient]
// of go-redis v9. It is a [store.Watcher]: a duplicate waiting for a
// running request is woken by Redis pub/sub when the claim ends (see
// Notifications). It also is a [store.Records] (the fenced plain put) for
// a composition with a lock. It passes the conformance suite in
// [github.com/idemkit/idemkit/store/storetest] on a single node and on a
// 3-master cluster.
//
//	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	backend, err := redisstore.New(client)
//	guard, err := middleware.New(backend)
//
// # Clients
//
// The client must bound its commands by the caller's ctx: [New] refuses a
// [*redis.Client], [*redis.ClusterClient] or [*redis.Ring] (failover ones
// included) built without ContextTimeoutEnabled: true, because go-redis
// otherwise ignores ctx deadlines and a stalled server would hold every
// call for ReadTimeout × (MaxRetries + 1) rather than the guard's op
// timeout. Other implementations of the interface are taken as they are.
//
// # Keys
//
// One record is one Redis key, a hash, so every operation is one script
// on one key (one cluster slot, no hash tags). The key is the prefix
// ([WithKeyPrefix], default none) followed by the record key itself when
// it is readable, so an operator finds "idempotency:<scope>:<key>" with
// SCAN, as [Store.List] does: at most 512 bytes of valid UTF-8 without control characters, not
// starting with '@'. Any other record key (longer, with control bytes or
// invalid UTF-8, or starting with '@') is stored as "@sha256:" followed by
// the unpadded base64url SHA-256 of the record key. A readable key never
// starts with '@', so the two forms never meet: distinct record keys never
// share a Redis key. Record keys may hold any bytes, up to
// [store.MaxKeyBytes].
//
// The hash reads:
//
//	state     claimed, completed, not-replayable, released or deleted
//	fence     the claim's fence
//	created   when the claim or the outcome was written (Unix ms)
//	expires   when the claim's lease runs out, or the outcome is forgotten (Unix ms)
//	fp        the request's fingerprint
//	response  the stored response (an outcome's; a claim that takes the hash over reports it, store.Record.Replaced, and removes it)
//	claim     the claim's token (a retry of a Claim gets its own claim back)
//
// # Time and expiry
//
// Every script reads the server's clock (TIME): a claim is live while TIME
// is before its expires, an outcome until its record TTL has passed. A new
// claim's fence is max(previous fence + 1, TIME in Unix ms), so fences grow
// without a counter. Every key carries an expiry (PEXPIREAT), so nothing is
// kept forever: a claim is kept for its lease plus [store.ClaimRetention]
// (so that a holder whose lease ran out still completes, as long as nobody
// claimed the key since), an outcome for its record TTL. A released claim
// or a deleted record leaves a tombstone (state and fence only, invisible,
// claimable at once) until the server's clock passes its fence, or none
// when it already has. No key outlives the later of its record's expiry
// (for a claim, plus the retention) and its fence by more than Redis's
// expiry cycle.
//
// Each operation costs one round trip (EVALSHA; the first call on a server
// that does not have the script yet sends it, one round trip more): a
// replay through the guard costs one, a first execution two. A refused
// claim writes nothing. A Claim or Complete that go-redis retries after a
// lost reply finds its own claim or outcome and reports it as its own.
//
// # Notifications
//
// Complete, Release and Delete notify in their own script, so a
// notification costs no round trip: they publish on a channel named like
// the record's Redis key (the same name, in the pub/sub namespace, so on
// the key's slot of a cluster). On a single node and through Sentinel (a
// [*redis.Client]) they PUBLISH; on a cluster (a [*redis.ClusterClient])
// they SPUBLISH (sharded pub/sub, Redis 7 or later), so a notification
// travels only within the shard that holds the key. Through any other
// client (a ring) nothing is published, watches never fire and waiters
// poll.
//
// The waiters of a store share one pub/sub connection per server, however
// many they are: one on a single node, one per master that holds a
// watched key on a cluster. The first watch opens it; a key's channel is
// subscribed once for all its waiters, and unsubscribed when the last one
// stops waiting; the connection is pinged after 3 s without traffic and
// closed after a minute without waiters. A watch returns once the server
// has confirmed its subscription (a round trip on that connection for the
// key's first waiter), so a completion that follows is never missed. When
// the connection fails, go-redis reconnects it, and every waiter is woken
// once to read its record again, since a notification may have been lost.
// Waiters keep polling at the guard's back-off in any case: a lost
// notification delays an answer, it never loses one. A lease that runs out
// without a release (its holder died) notifies nobody: waiters find out by
// polling.
//
// Under an ACL, allow the channels as well as the keys. The store's user
// needs its keys (~idempotency:*, or ~<prefix>*) and the channels named
// like them (&idempotency:*), which Redis 7 does not give a new user
// (acl-pubsub-default resetchannels); EVAL, EVALSHA and the commands the
// scripts call (TIME, HGET, HMGET, HSET, HDEL, DEL, PEXPIREAT, and
// PUBLISH, or SPUBLISH on a cluster); and the listener's SUBSCRIBE and
// UNSUBSCRIBE (SSUBSCRIBE and SUNSUBSCRIBE on a cluster) and PING; besides
// what the client itself sends (on a cluster, CLUSTER SLOTS). Without the
// channels the store still works, without notifications: a refused
// publication does not fail its script, a refused subscription refuses its
// watch at once, and waiters poll.
//
// # Memory and eviction
//
// Use maxmemory-policy noeviction for the Redis that holds the records (or
// a Redis of their own). Over its maxmemory Redis then refuses new claims
// and outcomes, which fail with RateLimited ("the Redis server is out of
// memory"), while replays, busy answers, extensions, releases and
// deletions go on. Every record has a TTL, so the volatile-* policies (and
// the allkeys-* ones) can evict a live record: an evicted outcome makes its
// retry run the work again, an evicted live claim lets a duplicate run it
// concurrently, and an evicted tombstone can let a new claim's fence repeat
// an old one. Choose such a policy only if that is acceptable.
//
// # Durability
//
// A record is as durable as the Redis that holds it: replication is
// asynchronous, so a failover can lose the latest claims and outcomes, and
// a restart loses what was not yet on disk (appendonly yes with
// appendfsync always keeps every acknowledged write). A lost claim lets a
// duplicate run the work while the first still runs; a lost outcome makes
// its retry run the work again. [WithWaitForReplicas] closes that window
// for failovers: a claim, an extension and an outcome count only once
// replicas have them (Redis WAIT), and fail closed (ServiceUnavailable)
// when they do not in time. A first execution then costs one round trip
// more (the claim's wait; the completion's rides with its script) plus
// the replication delay, and replays cost what they did. With one replica
// per master, the wait refuses claims from the failover until a replica is
// back; two replicas and a wait for one keep serving through it. The
// scripts read TIME before they write, which needs Redis 5 or later
// (scripts replicated by their effects).
//
// # Responses
//
// Responses above the limit ([WithMaxResponseBytes], default 512 MiB,
// Redis's largest string) are refused with [store.ErrTooLarge] before any
// I/O.
//
// # Errors
//
// Failures are [*idemkit.Error] values that unwrap to go-redis's error:
// context ends are Aborted or NetworkTimeout; a closed client, a broken or
// refused connection, LOADING, READONLY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN,
// MOVED, ASK, BUSY, NOREPLICAS and MISCONF are ServiceUnavailable; OOM and
// maxclients are RateLimited; NOAUTH, WRONGPASS and NOPERM are AuthFailed;
// anything else (WRONGTYPE, a malformed reply) is Internal. Messages never
// hold a key.
package redisstore
