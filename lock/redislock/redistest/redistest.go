package redistest

import (
	"context"
	"runtime"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/locktest"
	"github.com/idemkit/idemkit/lock/redislock"
)

// Main runs the package's tests and then stops every server they started.
// Call it from TestMain.
func Main(m *testing.M) { testenv.Main(m) }

// Backend makes clients for one kind of deployment. Each call of NewClient
// gives a new client with its own connection pool, closed when the test
// ends.
type Backend struct {
	// Name is the kind of deployment: "single" or "cluster".
	Name string
	// NewClient returns a new client of the deployment.
	NewClient func(t testing.TB) redis.UniversalClient
}

// Backends returns the deployments every case runs on: the shared single
// node ([Single]) and the shared cluster ([Cluster]).
func Backends() []Backend {
	return []Backend{{Name: "single", NewClient: Single}, {Name: "cluster", NewClient: Cluster}}
}

// Single returns a new client of the package's shared single node.
func Single(t testing.TB) redis.UniversalClient { return ClientFor(t, testenv.Redis(t).Addr) }

// ClientFor returns a new client of the node at addr (host:port), closed
// when the test ends.
func ClientFor(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Cluster returns a new client of the package's shared 3-master cluster.
func Cluster(t testing.TB) redis.UniversalClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisCluster(t).Addrs})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Probes fills e's RaiseFence, Fence and Stored with direct commands on the
// keys of layout, sent through c. Give it a client of its own: a locktest
// Env's Break closes the locker's. A key the lock package refuses fails
// the test.
func Probes(t testing.TB, e *locktest.Env, layout redislock.Layout, c redis.UniversalClient) {
	norm := func(k string) string {
		n, err := lock.NormalizeKey(k)
		if err != nil {
			t.Fatalf("probe: %v", err)
		}
		return n
	}
	e.RaiseFence = func(ctx context.Context, key string, f lock.Fence) error {
		return c.Set(ctx, layout.Fence(norm(key)), uint64(f), 0).Err()
	}
	e.Fence = func(ctx context.Context, key string) (lock.Fence, error) {
		v, err := c.Get(ctx, layout.Fence(norm(key))).Uint64()
		if err == redis.Nil {
			return 0, nil
		}
		return lock.Fence(v), err
	}
	e.Stored = func(ctx context.Context, key string) (bool, error) {
		n, err := c.Exists(ctx, layout.Lock(norm(key))).Result()
		return n == 1, err
	}
}

// BenchKinds returns the deployments benchmarked, by the names
// [BenchClients] takes: the shared single node and cluster ("single" and
// "cluster"; appendfsync always: every write waits for the disk), and a
// dedicated single node without fsync ("single-nofsync"), which shows the
// cost of the commands themselves.
func BenchKinds() []string { return []string{"single", "cluster", "single-nofsync"} }

// benchPoolSize is the connection pool of a benchmark client: it fits 32
// goroutines.
const benchPoolSize = 64

// BenchClients returns a maker of new clients of the deployment kind names
// (one of [BenchKinds]; any other name means "single"), each with a pool
// that fits 32 goroutines and closed when its test ends. For
// "single-nofsync" it starts the dedicated node, for b, at once.
func BenchClients(b *testing.B, kind string) func(t testing.TB) redis.UniversalClient {
	var addr string
	switch kind {
	case "cluster":
		return func(t testing.TB) redis.UniversalClient {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisCluster(t).Addrs, PoolSize: benchPoolSize})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
	case "single-nofsync":
		srv := testenv.NewRedis(b)
		if err := ClientFor(b, srv.Addr).ConfigSet(b.Context(), "appendfsync", "no").Err(); err != nil {
			b.Fatal(err)
		}
		addr = srv.Addr
	default:
		addr = testenv.Redis(b).Addr
	}
	return func(t testing.TB) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: benchPoolSize})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

// Parallel runs body b.N times over par goroutines (a plain loop for 1),
// reporting allocations and timing only the runs.
func Parallel(b *testing.B, par int, body func()) {
	b.ReportAllocs()
	b.ResetTimer()
	if par == 1 {
		for range b.N {
			body()
		}
		return
	}
	b.SetParallelism(max(1, par/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			body()
		}
	})
}
