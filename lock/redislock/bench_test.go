package redislock_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/redis/go-redis/v9"
)

// benchKinds are the deployments benchmarked: the shared single node and
// cluster (AOF, appendfsync always: every write waits for the disk), and a
// dedicated single node without fsync, which shows the cost of the
// commands themselves.
var benchKinds = []string{"single", "cluster", "single-nofsync"}

// benchClient is a client whose pool fits 32 goroutines.
func benchClient(b *testing.B, kind string) redis.UniversalClient {
	var c redis.UniversalClient
	switch kind {
	case "cluster":
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisCluster(b).Addrs, PoolSize: 64})
	case "single-nofsync":
		srv := testenv.NewRedis(b)
		c = redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
		if err := c.ConfigSet(b.Context(), "appendfsync", "no").Err(); err != nil {
			b.Fatal(err)
		}
	default:
		c = redis.NewClient(&redis.Options{Addr: testenv.Redis(b).Addr, PoolSize: 64})
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// parallel runs body b.N times over par goroutines (a plain loop for 1).
func parallel(b *testing.B, par int, body func()) {
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

// BenchmarkCycle measures acquire + release (ReleaseKey: the path lock.Do
// and the guard take) on a single node and on a cluster, at 1 and 32
// goroutines, on distinct keys and on one hot key. On the hot key most
// attempts are refused (contention): ns/op there is the cost of an attempt,
// and cycles/s counts the acquires that won.
func BenchmarkCycle(b *testing.B) {
	for _, kind := range benchKinds {
		for _, par := range []int{1, 32} {
			for _, hot := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/goroutines=%d/hot=%v", kind, par, hot), func(b *testing.B) {
					l, err := redislock.New(benchClient(b, kind), redislock.WithKeyPrefix(testenv.Name(b)))
					if err != nil {
						b.Fatal(err)
					}
					var seq, won atomic.Int64
					parallel(b, par, func() {
						key := "hot"
						if !hot {
							key = fmt.Sprint("k", seq.Add(1))
						}
						lease, ok, err := l.Acquire(b.Context(), key, 10*time.Second)
						if err != nil {
							b.Error(err)
							return
						}
						if !ok {
							return
						}
						won.Add(1)
						if _, err := l.ReleaseKey(b.Context(), lease.Key, lease.ID); err != nil {
							b.Error(err)
						}
					})
					b.ReportMetric(float64(won.Load())/b.Elapsed().Seconds(), "cycles/s")
				})
			}
		}
	}
}
