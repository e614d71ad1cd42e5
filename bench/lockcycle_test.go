package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/store/redisstore"
)

// BenchmarkRedisLockCycle times one goroutine's acquire + release cycles
// of idemkit's locks on Redis (lock.New over redisstore) and of
// bsm/redislock on distinct keys, against
// one Redis server with appendfsync everysec, and reports where a cycle's
// CPU goes: client-µs/op (this process), server-µs/op (redis-server's
// used_cpu_sys + used_cpu_user) and expire-µs/op (of the server's, its
// active expiry: expire_cycle_cpu_milliseconds, in whole milliseconds).
// Pinned to one core, a cycle costs its CPU work alone, and the two
// libraries compare exactly:
//
//	taskset -c 0 go test -run '^$' -bench BenchmarkRedisLockCycle -benchtime 40000x -count 3 .
func BenchmarkRedisLockCycle(b *testing.B) {
	srv := testenv.NewRedis(b, "--appendfsync", "everysec")
	newClient := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64, ContextTimeoutEnabled: true})
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	admin := newClient()
	ours, err := redisLocker(newClient())
	if err != nil {
		b.Fatal(err)
	}
	theirs := bsm.New(newClient())
	var seq atomic.Int64
	for _, s := range []struct {
		name  string
		cycle func(ctx context.Context, key string) error
	}{
		{"idemkit", func(ctx context.Context, key string) error {
			lease, ok, err := ours.Acquire(ctx, key, lockTTL)
			if err != nil || !ok {
				return fmt.Errorf("acquire: %v, %v", ok, err)
			}
			_, err = ours.ReleaseKey(ctx, lease.Key, lease.ID)
			return err
		}},
		{"bsm", func(ctx context.Context, key string) error {
			l, err := theirs.Obtain(ctx, key, lockTTL, nil)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
	} {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := b.Context()
			srv0, exp0 := serverCPU(b, admin)
			cli0 := clientCPU()
			for b.Loop() {
				if err := s.cycle(ctx, fmt.Sprint(s.name, ":", seq.Add(1))); err != nil {
					b.Fatal(err)
				}
			}
			srv1, exp1 := serverCPU(b, admin)
			cli1 := clientCPU()
			n := float64(b.N)
			b.ReportMetric((cli1-cli0).Seconds()/n*1e6, "client-µs/op")
			b.ReportMetric((srv1-srv0).Seconds()/n*1e6, "server-µs/op")
			b.ReportMetric((exp1-exp0).Seconds()/n*1e6, "expire-µs/op")
		})
	}
}

// serverCPU returns the CPU time redis-server has used, and how much of it
// its active expiry took.
func serverCPU(b *testing.B, c *redis.Client) (total, expire time.Duration) {
	info, err := c.Info(context.Background(), "cpu", "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(v, 64)
		switch name {
		case "used_cpu_sys", "used_cpu_user":
			total += time.Duration(f * float64(time.Second))
		case "expire_cycle_cpu_milliseconds":
			expire = time.Duration(f * float64(time.Millisecond))
		}
	}
	return total, expire
}

// clientCPU returns the CPU time this process has used.
func clientCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisLocker is idemkit's Redis lock: the lock library over the Redis
// engine, with their defaults.
func redisLocker(c *redis.Client) (*lock.Client, error) {
	s, err := redisstore.New(c)
	if err != nil {
		return nil, err
	}
	return lock.New(s)
}
