package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/locktest"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestLockConformance runs the lock suite through lock.New over the
// store, on a single node (the restart case on a server of its own) and on
// the 3-master cluster.
func TestLockConformance(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		locktest.Run(t, func(t *testing.T, cfg locktest.Config) *locktest.Env {
			if cfg.Restart {
				srv := testenv.NewRedis(t)
				e := lockEnv(t, nodeClient(t, srv.Addr), nodeClient(t, srv.Addr))
				e.Restart = func(t *testing.T) { srv.Restart(t) }
				return e
			}
			addr := testenv.Redis(t).Addr
			return lockEnv(t, nodeClient(t, addr), nodeClient(t, addr))
		})
	})
	t.Run("cluster", func(t *testing.T) {
		locktest.Run(t, func(t *testing.T, _ locktest.Config) *locktest.Env {
			return lockEnv(t, clusterClient(t), clusterClient(t))
		})
	})
}

// lockEnvs numbers the Envs, whose stores each have a prefix of their own
// (a case may build two in one test).
var lockEnvs atomic.Int64

// lockEnv is the lock suite's Env for a store on c, under a prefix of its
// own; admin, a client of the same deployment, reads and writes the
// records for the probes (the suite closes c).
func lockEnv(t *testing.T, c, admin redis.UniversalClient) *locktest.Env {
	p := fmt.Sprint(prefix(t), lockEnvs.Add(1), ":")
	s := newStore(t, c, redisstore.WithKeyPrefix(p))
	rk := func(k string) string { return redisstore.RedisKey(s, k) }
	return &locktest.Env{
		Store:  s,
		Margin: 30 * time.Millisecond,
		RaiseFence: func(ctx context.Context, k string, f idemkit.Fence) error {
			// A tombstone of fence f, as a release leaves it.
			if err := admin.HSet(ctx, rk(k), "state", "released", "fence", strconv.FormatUint(uint64(f), 10)).Err(); err != nil {
				return err
			}
			return admin.PExpireAt(ctx, rk(k), time.UnixMilli(int64(f)+1).Add(time.Minute)).Err()
		},
		Fence: func(ctx context.Context, k string) (idemkit.Fence, error) {
			v, err := admin.HGet(ctx, rk(k), "fence").Result()
			if err == redis.Nil {
				return 0, nil
			}
			if err != nil {
				return 0, err
			}
			f, err := strconv.ParseUint(v, 10, 64)
			return idemkit.Fence(f), err
		},
		Stored: func(ctx context.Context, k string) (bool, error) {
			st, err := admin.HGet(ctx, rk(k), "state").Result()
			if err == redis.Nil {
				return false, nil
			}
			return st == "claimed" || st == "completed" || st == "not-replayable", err
		},
		Keys:  func(ctx context.Context) ([]string, error) { return immortal(ctx, admin, p) },
		Break: func() { _ = c.Close() },
	}
}
