package bench

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"testing"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
)

var locksOnly = flag.Bool("locks", false,
	"TestRedisLocks: run the Redis lock scenarios alone, sized by -duration, and print their table")

const lockTTL = 10 * time.Second

// TestRedisLocks runs the Redis lock scenarios alone, sized by -duration,
// when given -locks (TestReport runs them with the others):
//
//	go test -count=1 -run '^TestRedisLocks$' -timeout 30m . -args -locks -duration=3s
func TestRedisLocks(t *testing.T) {
	if !*locksOnly {
		t.Skip("TestReport runs these scenarios; -locks runs them alone")
	}
	results := redisScenarios(t, *duration)
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, results); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + buf.String())
}

// hotWait bounds how long a hot-key cycle may wait for the lock.
const hotWait = 30 * time.Second

// redisScenarios runs acquire+release cycles of the three Redis lock
// libraries against dedicated servers: distinct keys and one hot key, at
// 1 and 32 goroutines, on a server that fsyncs every write before it
// answers (appendfsync always, where the disk sets the pace) and on one
// that fsyncs once a second (appendfsync everysec, the usual production
// setting, where the libraries' own work does).
func redisScenarios(t *testing.T, d time.Duration) []Result {
	var results []Result
	for _, fsync := range []string{"always", "everysec"} {
		results = append(results, redisLockScenarios(t, d, fsync)...)
	}
	return results
}

// redisLockScenarios runs the lock scenarios on a server of its own with
// the appendfsync policy fsync. Each library has its own client (one pool
// each, same options). idemkit's locks are lock.New over redisstore, with
// their defaults: the store's busy calls share round trips, and on the hot
// key lock.Do's waiters are woken by its pub/sub notifications, in turn.
func redisLockScenarios(t *testing.T, d time.Duration, fsync string) []Result {
	srv := testenv.NewRedis(t, "--appendfsync", fsync)
	newClient := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ctx := t.Context()

	ours, err := redisLocker(newClient())
	if err != nil {
		t.Fatal(err)
	}
	bsmClient := bsm.New(newClient())
	rs := redsync.New(goredis.NewPool(newClient()))

	type subject struct {
		name     string
		distinct func(ctx context.Context, key string) error
		hot      func(ctx context.Context, key string) error
	}
	subjects := []subject{
		{
			name: "idemkit lock (redisstore)",
			distinct: func(ctx context.Context, key string) error {
				lease, ok, err := ours.Acquire(ctx, key, lockTTL)
				if err != nil || !ok {
					return errors.Join(err, errNotAcquired(ok))
				}
				_, err = ours.ReleaseKey(ctx, lease.Key, lease.ID)
				return err
			},
			hot: func(ctx context.Context, key string) error {
				// lock.Do with the same back-off as bsm's. The store is a
				// store.Watcher: a release wakes the longest waiter at once,
				// and polling is only the fallback.
				return lock.Do(ctx, ours, key, func(context.Context, lock.Lease) error { return nil },
					lock.WithTTL(lockTTL), lock.WithBackoff(idemkit.Backoff{Base: 2 * time.Millisecond, Max: 50 * time.Millisecond}),
					lock.WithTimeout(hotWait), lock.WithRenewInterval(-1))
			},
		},
		{
			name: "bsm/redislock",
			distinct: func(ctx context.Context, key string) error {
				l, err := bsmClient.Obtain(ctx, key, lockTTL, nil)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			},
			hot: func(ctx context.Context, key string) error {
				wctx, cancel := context.WithTimeout(ctx, hotWait)
				defer cancel()
				l, err := bsmClient.Obtain(wctx, key, lockTTL, &bsm.Options{
					RetryStrategy: bsm.ExponentialBackoff(2*time.Millisecond, 50*time.Millisecond),
				})
				if err != nil {
					return err
				}
				return l.Release(ctx)
			},
		},
		{
			name: "redsync (one pool)",
			distinct: func(ctx context.Context, key string) error {
				m := rs.NewMutex(key, redsync.WithExpiry(lockTTL), redsync.WithTries(1))
				if err := m.LockContext(ctx); err != nil {
					return err
				}
				_, err := m.UnlockContext(ctx)
				return err
			},
			hot: func(ctx context.Context, key string) error {
				// redsync's own waiting: up to 32 tries, 50–250 ms random delays.
				m := rs.NewMutex(key, redsync.WithExpiry(lockTTL), redsync.WithTries(1<<10))
				if err := m.LockContext(ctx); err != nil {
					return err
				}
				_, err := m.UnlockContext(ctx)
				return err
			},
		},
	}
	// Each scenario runs in rounds, every library once a round, so that
	// the slow drifts of a shared machine (and its disk, which every write
	// waits for) hit every row alike; a row adds up its rounds (its p50 is
	// the median of theirs, its p99 the worst).
	const rounds = 5
	var results []Result
	for _, mode := range []string{"distinct keys", "one hot key"} {
		for _, workers := range []int{1, 32} {
			perSubject := make([][]Result, len(subjects))
			for round := range rounds {
				for si, s := range subjects {
					run := s.distinct
					if mode == "one hot key" {
						run = s.hot
					}
					prefix := fmt.Sprintf("%s:%s:%d:%d", testenv.Name(t), s.name, workers, round)
					r := Run(ctx, workers, d/rounds, func(ctx context.Context, w, i int) error {
						key := prefix + ":hot"
						if mode == "distinct keys" {
							key = fmt.Sprintf("%s:%d:%d", prefix, w, i)
						}
						return run(ctx, key)
					})
					perSubject[si] = append(perSubject[si], r)
				}
			}
			for si, s := range subjects {
				r := combine(perSubject[si])
				r.Group, r.Subject, r.Mode = "Redis locks: acquire + release (appendfsync "+fsync+")", s.name, mode
				results = append(results, r)
			}
		}
	}
	return results
}

func errNotAcquired(ok bool) error {
	if ok {
		return nil
	}
	return errors.New("not acquired")
}
