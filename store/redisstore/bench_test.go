package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/redis/go-redis/v9"
)

// benchKinds are the deployments benchmarked: the shared single node and
// cluster (appendfsync always: every write waits for the disk), and a
// single node of the benchmark's own without fsync, which shows the cost
// of the commands themselves.
var benchKinds = []string{"single", "cluster", "single-nofsync"}

// benchClients returns a maker of clients of the deployment kind, each
// with a pool that fits 32 goroutines.
func benchClients(b *testing.B, kind string) func(t testing.TB) redis.UniversalClient {
	const pool = 64
	var addr string
	switch kind {
	case "cluster":
		return func(t testing.TB) redis.UniversalClient {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisCluster(t).Addrs, PoolSize: pool, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
	case "single-nofsync":
		srv := testenv.NewRedis(b)
		if err := nodeClient(b, srv.Addr).ConfigSet(b.Context(), "appendfsync", "no").Err(); err != nil {
			b.Fatal(err)
		}
		addr = srv.Addr
	default:
		addr = testenv.Redis(b).Addr
	}
	return func(t testing.TB) redis.UniversalClient {
		return nodeClient(t, addr, func(o *redis.Options) { o.PoolSize = pool })
	}
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

// BenchmarkStore measures the store's operations with 1 KiB responses: a
// claim and its completion on a new key (a first execution's two round
// trips), a claim that replays, and a Get.
func BenchmarkStore(b *testing.B) {
	body := make([]byte, 1024)
	for _, kind := range benchKinds {
		newClient := benchClients(b, kind)
		for _, par := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", kind, par), func(b *testing.B) {
				s := newStore(b, newClient(b))
				ctx := b.Context()
				var seq atomic.Int64
				b.Run("claim-complete", func(b *testing.B) {
					parallel(b, par, func() {
						c, claimed, err := s.Claim(ctx, fmt.Sprint("k", seq.Add(1)), fp.String(), 10*time.Second)
						if err != nil || !claimed {
							b.Error(claimed, err)
							return
						}
						c.State, c.Response = store.StateCompleted, body
						if ok, err := s.Complete(ctx, c, time.Hour); err != nil || !ok {
							b.Error(ok, err)
						}
					})
				})
				b.Run("claim-replay", func(b *testing.B) {
					parallel(b, par, func() {
						if _, claimed, err := s.Claim(ctx, "k1", fp.String(), 10*time.Second); err != nil || claimed {
							b.Error(claimed, err)
						}
					})
				})
				b.Run("get", func(b *testing.B) {
					parallel(b, par, func() {
						if _, ok, err := s.Get(ctx, "k1"); err != nil || !ok {
							b.Error(ok, err)
						}
					})
				})
			})
		}
	}
}

// BenchmarkGuard measures a guard over Redis: a first execution (a new key
// each time) and a replay.
func BenchmarkGuard(b *testing.B) {
	for _, kind := range benchKinds {
		newClient := benchClients(b, kind)
		for _, par := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", kind, par), func(b *testing.B) {
				g := newGuard(b, newClient(b))
				fn := func(context.Context) (middleware.Result, error) {
					return middleware.Result{Value: []byte(`{"id":"rcpt_1"}`)}, nil
				}
				var seq atomic.Int64
				b.Run("first", func(b *testing.B) {
					parallel(b, par, func() {
						if _, err := g.Execute(b.Context(), fmt.Sprint("first-", seq.Add(1)), fp, fn); err != nil {
							b.Error(err)
						}
					})
				})
				if _, err := g.Execute(b.Context(), "replayed", fp, fn); err != nil {
					b.Fatal(err)
				}
				b.Run("replay", func(b *testing.B) {
					parallel(b, par, func() {
						if out, err := g.Execute(b.Context(), "replayed", fp, fn); err != nil || !out.Replayed {
							b.Error(out, err)
						}
					})
				})
			})
		}
	}
}
