package redislock_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// backend makes clients of one kind of deployment; each client has its own
// connection pool and is closed when its test ends.
type backend struct {
	name      string
	newClient func(t testing.TB) redis.UniversalClient
}

// backends are the deployments most tests run on: the shared single node
// and the shared 3-master cluster.
func backends() []backend {
	return []backend{{"single", single}, {"cluster", cluster}}
}

func single(t testing.TB) redis.UniversalClient { return clientFor(t, testenv.Redis(t).Addr) }

// clientFor returns a new client of the node at addr that honours ctx
// deadlines, closed when the test ends.
func clientFor(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaintNotificationsConfig: noMaintNotifications()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func cluster(t testing.TB) redis.UniversalClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisCluster(t).Addrs, ContextTimeoutEnabled: true, MaintNotificationsConfig: noMaintNotifications()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// noRetry is a client that reports the first error it meets (go-redis
// would otherwise retry LOADING, READONLY, timeouts and the like).
func noRetry(t testing.TB, o *redis.Options) *redis.Client {
	o.MaxRetries = -1
	o.ContextTimeoutEnabled = true
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newLocker(t *testing.T, c redis.UniversalClient, opts ...redislock.Option) *redislock.Locker {
	t.Helper()
	l, err := redislock.New(c, append([]redislock.Option{redislock.WithKeyPrefix(testenv.Name(t))}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

// record is a lock record or tombstone as stored.
type record struct {
	id                string
	kind              byte // 'c', 'f', 't' or 'r'; upper case when watched
	fence             idemkit.Fence
	acquired, expires int64
	key               string
}

// watched reports whether the record is a lease a watcher waits for.
func (r record) watched() bool { return r.kind == 'C' || r.kind == 'F' }

// readRecord reads the lock record (or tombstone) stored under name;
// found is false when there is none. A compact lease's fence and expiry
// come from the key's own expiry.
func readRecord(ctx context.Context, c redis.UniversalClient, name string) (r record, found bool, err error) {
	v, err := c.Get(ctx, name).Result()
	if err == redis.Nil {
		return record{}, false, nil
	}
	if err != nil {
		return record{}, false, err
	}
	if len(v) < 23 {
		return record{}, true, errMalformed
	}
	r = record{id: v[:22], kind: v[22]}
	switch r.kind {
	case 'r': // a light tombstone: no fence of its own
		if len(v) != 23 {
			return record{}, true, errMalformed
		}
	case 'c', 'C':
		if len(v) < 38 {
			return record{}, true, errMalformed
		}
		ttl, err := strconv.ParseInt(v[23:38], 10, 64)
		if err != nil {
			return record{}, true, errMalformed
		}
		at, err := c.PExpireTime(ctx, name).Result()
		if err != nil {
			return record{}, true, err
		}
		r.expires = at.Milliseconds()
		r.fence, r.acquired, r.key = idemkit.Fence(r.expires-ttl), r.expires-ttl, v[38:]
	case 'f', 'F':
		if len(v) < 68 {
			return record{}, true, errMalformed
		}
		f, err1 := strconv.ParseUint(v[23:38], 10, 64)
		a, err2 := strconv.ParseInt(v[38:53], 10, 64)
		e, err3 := strconv.ParseInt(v[53:68], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return record{}, true, errMalformed
		}
		r.fence, r.acquired, r.expires, r.key = idemkit.Fence(f), a, e, v[68:]
	case 't':
		f, err := strconv.ParseUint(v[23:38], 10, 64)
		if err != nil || len(v) != 38 {
			return record{}, true, errMalformed
		}
		r.fence = idemkit.Fence(f)
	default:
		return record{}, true, errMalformed
	}
	return r, true, nil
}

var errMalformed = errors.New("malformed lock record")

// rawRecord is the stored form of a full lock record.
func rawRecord(id string, fence idemkit.Fence, acquired, expires int64, key string) string {
	return id + "f" + fence.String() + pad(acquired) + pad(expires) + key
}

// rawTombstone is the stored form of a tombstone with fence f.
func rawTombstone(f idemkit.Fence) string { return redislock.TombstoneID + "t" + f.String() }

func pad(n int64) string {
	s := strconv.FormatInt(n, 10)
	for len(s) < 15 {
		s = "0" + s
	}
	return s
}

// persistentKeys returns every key under prefix, on every master of c,
// that has no expiry.
func persistentKeys(ctx context.Context, c redis.UniversalClient, prefix string) ([]string, error) {
	var (
		mu  sync.Mutex
		out []string
	)
	scan := func(ctx context.Context, n *redis.Client) error {
		iter := n.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			ttl, err := n.Do(ctx, "pttl", k).Int64()
			if err != nil {
				return err
			}
			if ttl == -1 {
				mu.Lock()
				out = append(out, k)
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	switch c := c.(type) {
	case *redis.ClusterClient:
		err := c.ForEachMaster(ctx, scan)
		return out, err
	case *redis.Client:
		err := scan(ctx, c)
		return out, err
	}
	panic("persistentKeys: an unexpected client type")
}

// countKeys returns how many keys are under prefix, on every master of c.
func countKeys(ctx context.Context, c redis.UniversalClient, prefix string) (int, error) {
	var (
		mu sync.Mutex
		n  int
	)
	scan := func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			n++
			mu.Unlock()
		}
		return iter.Err()
	}
	switch c := c.(type) {
	case *redis.ClusterClient:
		err := c.ForEachMaster(ctx, scan)
		return n, err
	case *redis.Client:
		err := scan(ctx, c)
		return n, err
	}
	panic("countKeys: an unexpected client type")
}

// serverNow returns the clock of the server at addr (any node of a
// cluster: the test nodes share the machine's clock).
func serverNow(t *testing.T, c redis.UniversalClient) time.Time {
	t.Helper()
	now, err := c.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// Benchmarks.

// benchKinds are the deployments benchmarked: the shared single node and
// cluster (appendfsync always: every write waits for the disk), and a
// dedicated single node without fsync, which shows the cost of the
// commands themselves.
var benchKinds = []string{"single", "cluster", "single-nofsync"}

// benchPoolSize is the connection pool of a benchmark client: it fits 32
// goroutines.
const benchPoolSize = 64

// benchClient returns a new client of the deployment kind (one of
// benchKinds), with a pool that fits 32 goroutines.
func benchClient(b *testing.B, kind string) redis.UniversalClient {
	switch kind {
	case "cluster":
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisCluster(b).Addrs, PoolSize: benchPoolSize, ContextTimeoutEnabled: true})
		b.Cleanup(func() { _ = c.Close() })
		return c
	case "single-nofsync":
		srv := testenv.NewRedis(b)
		if err := clientFor(b, srv.Addr).ConfigSet(b.Context(), "appendfsync", "no").Err(); err != nil {
			b.Fatal(err)
		}
		return benchSingle(b, srv.Addr)
	}
	return benchSingle(b, testenv.Redis(b).Addr)
}

func benchSingle(b *testing.B, addr string) redis.UniversalClient {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: benchPoolSize, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// parallel runs body b.N times over par goroutines (a plain loop for 1),
// reporting allocations and timing only the runs.
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

// noMaintNotifications turns go-redis's maintenance notifications off: in
// their default auto mode, go-redis v9.23 writes the client's options when
// a server refuses them (Redis before 8), unguarded against the
// connections taken with Conn, which WithWaitForReplicas uses (a data race
// of go-redis's own).
func noMaintNotifications() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}
