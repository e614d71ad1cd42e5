package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
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
			e := lockEnv(t, clusterClient(t), clusterClient(t))
			// A closed cluster client takes about 100 ms to fail a call
			// (go-redis's retries): the transport-failure cases need room
			// for two attempts.
			e.Margin = 100 * time.Millisecond
			return e
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
			return admin.SetArgs(ctx, rk(k), "r"+strconv.FormatUint(uint64(f), 10),
				redis.SetArgs{ExpireAt: time.UnixMilli(int64(f) + 1).Add(time.Minute)}).Err()
		},
		Fence: func(ctx context.Context, k string) (idemkit.Fence, error) {
			_, f, _, err := redisstore.Stored(ctx, admin, s, k)
			return f, err
		},
		Stored: func(ctx context.Context, k string) (bool, error) {
			form, _, found, err := redisstore.Stored(ctx, admin, s, k)
			return found && (form == 'c' || form == 'o' || form == 'n'), err
		},
		Keys:  func(ctx context.Context) ([]string, error) { return immortal(ctx, admin, p) },
		Break: func() { _ = c.Close() },
	}
}

// TestLockOneHolderAcrossClients: 32 goroutines of two lock Clients, each
// Client on a redis client and a store of its own, take one key through
// lock.Do 10 times each, on a single node and on the cluster: fn never
// runs twice at once, runs 320 times, and every holder's fence is greater
// than the one before.
func TestLockOneHolderAcrossClients(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			var clients [2]*lock.Client
			for i := range clients {
				c, err := lock.New(newStore(t, b.newClient(t)))
				if err != nil {
					t.Fatal(err)
				}
				clients[i] = c
			}
			var (
				wg       sync.WaitGroup
				mu       sync.Mutex
				last     idemkit.Fence
				inside   atomic.Int64
				ran      atomic.Int64
				problems = make(chan string, 320)
			)
			for g := range 32 {
				wg.Go(func() {
					for range 10 {
						err := lock.Do(ctx, clients[g%2], "shared", func(_ context.Context, l lock.Lease) error {
							if inside.Add(1) != 1 {
								problems <- "fn ran twice at once"
							}
							mu.Lock()
							if l.Fence <= last {
								problems <- fmt.Sprintf("fence %v after %v", l.Fence, last)
							}
							last = l.Fence
							mu.Unlock()
							time.Sleep(100 * time.Microsecond)
							ran.Add(1)
							inside.Add(-1)
							return nil
						}, lock.WithTTL(time.Minute), lock.WithRenewInterval(-1), lock.WithTimeout(time.Minute))
						if err != nil {
							problems <- fmt.Sprint("Do: ", err)
							return
						}
					}
				})
			}
			wg.Wait()
			close(problems)
			for p := range problems {
				t.Fatal(p)
			}
			if n := ran.Load(); n != 320 {
				t.Fatalf("fn ran %d times; want 320", n)
			}
		})
	}
}

// TestLockLostReplies: an acquire whose reply is lost on the way back is
// sent again by the client and gets the lease it took (not "locked"); an
// extension's too gets its lease extended; and after a release whose reply
// is lost the key is free.
func TestLockLostReplies(t *testing.T) {
	ctx := t.Context()
	l := newLink(t, testenv.Redis(t).Addr)
	c, err := lock.New(newStore(t, nodeClient(t, l.addr())))
	if err != nil {
		t.Fatal(err)
	}
	l.dropReplyTo("pexpiretime")
	lease, ok, err := c.Acquire(ctx, "k", time.Minute)
	if err != nil || !ok || l.dropped.Load() != 1 {
		t.Fatalf("an acquire whose reply was lost: %+v, %v, %v (lost %d); want the lease", lease, ok, err, l.dropped.Load())
	}
	l.dropReplyTo(redisstore.ScriptSHA("extend"))
	st, err := c.Extend(ctx, lease.ID, 2*time.Minute)
	if err != nil || !st.OK || !st.ExpiresAt.After(lease.ExpiresAt) || l.dropped.Load() != 2 {
		t.Fatalf("an extension whose reply was lost: %+v, %v (lost %d); want extended", st, err, l.dropped.Load())
	}
	l.dropReplyTo(redisstore.ScriptSHA("release"))
	if _, err := c.Release(ctx, lease.ID); err != nil || l.dropped.Load() != 3 {
		t.Fatalf("a release whose reply was lost: %v (lost %d)", err, l.dropped.Load())
	}
	if locked, err := c.IsLocked(ctx, "k"); err != nil || locked {
		t.Fatalf("after the release: locked %v, %v; want free", locked, err)
	}
}
