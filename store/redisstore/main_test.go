package redisstore_test

import (
	"testing"

	"github.com/idemkit/idemkit/internal/testenv"
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
