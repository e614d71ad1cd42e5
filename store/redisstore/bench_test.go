package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// benchKinds: the shared single node and cluster (appendfsync always: each
// write waits for the disk) and a dedicated single node without fsync.
var benchKinds = []string{"single", "cluster", "single-nofsync"}

func benchClient(b *testing.B, kind string) func(testing.TB) redis.UniversalClient {
	var addr string
	switch kind {
	case "cluster":
		return func(t testing.TB) redis.UniversalClient {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisCluster(t).Addrs, PoolSize: 64})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
	case "single-nofsync":
		srv := testenv.NewRedis(b)
		if err := clientFor(b, srv.Addr).ConfigSet(b.Context(), "appendfsync", "no").Err(); err != nil {
			b.Fatal(err)
		}
		addr = srv.Addr
	default:
		addr = testenv.Redis(b).Addr
	}
	return func(t testing.TB) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

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

// BenchmarkStore measures Get (of a 1 KiB record) and Put (1 KiB).
func BenchmarkStore(b *testing.B) {
	body := make([]byte, 1024)
	for _, kind := range benchKinds {
		for _, par := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", kind, par), func(b *testing.B) {
				s, err := redisstore.New(benchClient(b, kind)(b), redisstore.WithKeyPrefix(testenv.Name(b)))
				if err != nil {
					b.Fatal(err)
				}
				rec := store.Record{Key: "k", Fingerprint: fp.String(), State: store.StateCompleted, Response: body, Fence: 1}
				if _, err := s.Put(b.Context(), rec, time.Hour); err != nil {
					b.Fatal(err)
				}
				b.Run("get", func(b *testing.B) {
					parallel(b, par, func() {
						if _, ok, err := s.Get(b.Context(), "k"); err != nil || !ok {
							b.Error(ok, err)
						}
					})
				})
				var seq atomic.Int64
				b.Run("put", func(b *testing.B) {
					parallel(b, par, func() {
						r := rec
						r.Key = fmt.Sprint("k", seq.Add(1))
						if _, err := s.Put(b.Context(), r, time.Hour); err != nil {
							b.Error(err)
						}
					})
				})
			})
		}
	}
}

// BenchmarkGuard measures a guard over Redis: a first execution (a new key
// each time) and a replay, combined and not.
func BenchmarkGuard(b *testing.B) {
	for _, kind := range benchKinds {
		newClient := benchClient(b, kind)
		for _, combined := range []bool{true, false} {
			for _, par := range []int{1, 32} {
				b.Run(fmt.Sprintf("%s/combined=%v/goroutines=%d", kind, combined, par), func(b *testing.B) {
					n := newBenchNode(b, newClient, combined)
					fn := func(context.Context) (middleware.Result, error) {
						return middleware.Result{Value: []byte(`{"id":"rcpt_1"}`)}, nil
					}
					var seq atomic.Int64
					b.Run("first", func(b *testing.B) {
						parallel(b, par, func() {
							if _, err := n.Execute(b.Context(), fmt.Sprint("first-", seq.Add(1)), fp, fn); err != nil {
								b.Error(err)
							}
						})
					})
					if _, err := n.Execute(b.Context(), "replayed", fp, fn); err != nil {
						b.Fatal(err)
					}
					b.Run("replay", func(b *testing.B) {
						parallel(b, par, func() {
							if out, err := n.Execute(b.Context(), "replayed", fp, fn); err != nil || !out.Replayed {
								b.Error(out, err)
							}
						})
					})
				})
			}
		}
	}
}

func newBenchNode(b *testing.B, newClient func(testing.TB) redis.UniversalClient, combined bool) *middleware.Guard {
	sc := newClient(b)
	lc := sc
	if !combined {
		lc = newClient(b)
	}
	prefix := testenv.Name(b)
	l, err := redislock.New(lc, redislock.WithKeyPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	s, err := redisstore.New(sc, redisstore.WithKeyPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	if s.Combines(l) != combined {
		b.Fatal("unexpected combining")
	}
	g, err := middleware.New(s, l)
	if err != nil {
		b.Fatal(err)
	}
	return g
}
