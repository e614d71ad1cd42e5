package redislock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/locktest"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// backend makes clients for one kind of deployment. Each call gives a new
// client with its own connection pool, closed when the test ends.
type backend struct {
	name      string
	newClient func(t testing.TB) redis.UniversalClient
}

func single(t testing.TB) redis.UniversalClient { return clientFor(t, testenv.Redis(t).Addr) }

func clientFor(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func cluster(t testing.TB) redis.UniversalClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisCluster(t).Addrs})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var backends = []backend{{"single", single}, {"cluster", cluster}}

// probes fills the Env's probes with direct commands on the locker's
// layout, through a client of their own (Break closes the locker's).
func probes(t *testing.T, e *locktest.Env, layout redislock.Layout, c redis.UniversalClient) {
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
	e.ExpiresNatively = true
	e.Margin = 50 * time.Millisecond
}

// factory builds a fresh locker with a unique prefix on a new client of b.
// The fence-survives-restart case gets a dedicated server it may restart.
func factory(b backend) locktest.Factory {
	return func(t *testing.T, cfg locktest.Config) *locktest.Env {
		newClient := b.newClient
		var restart func(t *testing.T)
		if b.name == "single" && strings.HasPrefix(lastElem(t.Name()), "SG10_") {
			srv := testenv.NewRedis(t)
			newClient = func(t testing.TB) redis.UniversalClient { return clientFor(t, srv.Addr) }
			restart = func(t *testing.T) { srv.Restart(t) }
		}
		c := newClient(t)
		l, err := redislock.New(c, redislock.WithKeyPrefix(testenv.Name(t)),
			redislock.WithCleanupInIsLocked(cfg.CleanupInIsLocked), redislock.WithLogger(cfg.Logger))
		if err != nil {
			t.Fatal(err)
		}
		e := &locktest.Env{Locker: l, Break: func() { _ = c.Close() }, Restart: restart}
		probes(t, e, l.Layout(), newClient(t))
		return e
	}
}

func lastElem(name string) string { return name[strings.LastIndexByte(name, '/')+1:] }
