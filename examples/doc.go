// Package examples holds runnable programs that show idemkit at work, one
// folder per program. It is a module of its own and is never tagged.
//
//   - quickstart: what `make demo` runs, on the memory backend; a nested
//     module of its own that needs only the root module, so it builds fast.
//   - nethttp, gin, echo, echo5: the same demo service (POST /orders, POST
//     /notes, GET /stats) on net/http, gin, echo v4 and echo v5, on any
//     backend (-store memory, redis, redis-cluster, postgres, firestore).
//   - grpc: grpc.testing.TestService with UnaryCall guarded, on the same
//     backends.
//   - connect: the same TestService as Connect handlers behind
//     connectinterceptor, one port for the Connect, gRPC and gRPC-Web
//     protocols.
//   - redisauth: the program to copy: a net/http order service run as any
//     number of instances over one Redis, with bearer-token authentication
//     and a scope hook that takes the principal from the verified token.
//   - orders: each order commits with its idempotency record (PostgreSQL).
//   - lockdemo: the lock layer on the in-memory backend: contention,
//     growing fences, renewal of a slow job's lease, and fencing out a stale
//     holder.
//   - otelsuite: no program: the idemkitotel hook's tests through every
//     adapter and on Redis, which need modules idemkitotel must not require
//     (its users would get them).
//
// The server demos (nethttp, gin, echo, grpc) take -metrics: the guard is
// then observed by the idemkitotel hook, whose metrics are served in the
// Prometheus text format at GET /metrics on the demo's own address.
package examples
