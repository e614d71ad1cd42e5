// Package redistest helps test code built on Redis, such as
// [github.com/idemkit/idemkit/lock/redislock] and the Redis record store,
// against real servers: it starts them (a single node and a 3-master
// Redis Cluster, shared by the package's tests, or a dedicated node),
// makes clients with their own connection pools that close when the test
// ends, fills the probes of a [locktest.Env] for a [redislock.Layout], and
// runs benchmarks over the kinds of deployment.
//
// It is the test infrastructure of this repository's Redis modules and is
// just as useful to a user who tests their own code on a Redis lock or
// store. A package that uses it runs its tests through [Main], which stops
// the servers they started:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
//	func TestThing(t *testing.T) {
//		for _, b := range redistest.Backends() {
//			t.Run(b.Name, func(t *testing.T) {
//				l, err := redislock.New(b.NewClient(t))
//				...
//			})
//		}
//	}
//
// The servers are redis-server processes on free loopback ports (the
// Debian package redis-server provides the binary); the environment
// variables IDEMKIT_REDIS_ADDR and IDEMKIT_REDIS_CLUSTER_ADDRS
// (comma-separated) name servers to use instead of the shared ones.
package redistest
