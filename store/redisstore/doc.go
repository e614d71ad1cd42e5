// Package redisstore is the Redis engine: a [store.Store] whose records
// carry their own lease, on a single node, through Sentinel (a failover
// client) or on Redis Cluster, through any [redis.UniversalClient] of
// go-redis v9. It serves the guard ([github.com/idemkit/idemkit/middleware])
// and the lock library ([github.com/idemkit/idemkit/lock]) alike; it is a
// [store.Watcher] (waiters are woken by pub/sub), a [store.Stepper] (a
// claim's recovery points) and a [store.Records] (the fenced plain put) for
// a composition with a lock.
//
//	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	backend, err := redisstore.New(client)
//	guard, err := middleware.New(backend) // or locks: lock.New(backend)
//
// One record is one string under the prefix ([WithKeyPrefix]) and the
// record key itself when it is readable (at most 512 bytes of UTF-8
// without control characters, not starting with '@'), else "@sha256:" and
// its base64url SHA-256, so every operation touches one key (one cluster
// slot) and is judged by the server's clock (TIME). A claim of a free key,
// a replay, a busy answer and a Get are one transaction of plain commands
// (SET … NX GET, PEXPIRETIME, TIME); a take-over of a key that is not free,
// an extension, a completion, a step, a release, a deletion and a put are
// one script each. Each is one round trip, sent as a pipeline that concurrent
// calls share under load (on a cluster, transactions go alone). Fences and
// expiry follow the rule of [store.Store]; a released or deleted record
// leaves a tombstone until the clock passes its fence plus
// [WithMaxClockStep]. Every key has an expiry. Redis 7.0 or later.
//
// A claim's steps ([Store.RecordStep]) follow its fingerprint in the same
// value, so a claim without steps, its release and a lock cycle write what
// they would without them; a released claim with steps leaves a tombstone
// that keeps fingerprint and steps, which the take-over's script carries
// to the next claim of the fingerprint in its one round trip.
//
// Complete, Release and Delete publish on a channel named like the
// record's key in their own script (SPUBLISH on a cluster); a store's
// watches share one pub/sub connection per server. [WithWaitForReplicas]
// and [WithWaitForAOF] make claims, extensions, steps and outcomes wait
// for replicas or fsyncs. Failures are [*idemkit.Error] values mapped by type
// and server error code; messages never hold a key.
//
// Deployment (ACLs, eviction policy, durability, failovers) and the
// record's layout: docs/backends.md, section Redis.
package redisstore
