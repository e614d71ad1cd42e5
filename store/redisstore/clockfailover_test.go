package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestFenceGrowsAcrossFailoverToReplicaBehind: a key claimed and released
// on the master, the release on the replica, then a Sentinel failover to
// that replica, whose clock is 5 s behind: the key's next claim, through
// the same client, has a fence above the last. (A Sentinel failover takes
// over a second, more than a replica 50 ms behind loses: that step is
// TestFenceGrowsAcrossPromotionOfReplicaBehind's.)
func TestFenceGrowsAcrossFailoverToReplicaBehind(t *testing.T) {
	const step = 5 * time.Second
	clock := testenv.NewClock(t)
	clock.Set(-step)
	s := testenv.NewSentinel(t, testenv.ReplicaClock(clock))
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs, ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	st := newStore(t, c)
	k := t.Name()
	last := claimAndRelease(t, st, k)
	awaitReplica(t, s.Master(t))
	behind := s.DataAddrs[1]
	if r := s.Failover(t); r.NewMaster != behind {
		t.Fatalf("the failover promoted %s, not the replica %s whose clock is behind", r.NewMaster, behind)
	}
	wantBehind(t, behind, step)
	next := claimEventually(t, st, k)
	if next.Fence <= last.Fence {
		t.Fatalf("after a failover to a replica %v behind, the key's next claim has fence %v, not above its last %v (%d lower)",
			step, next.Fence, last.Fence, int64(last.Fence)-int64(next.Fence))
	}
}

// TestFenceGrowsAcrossPromotionOfReplicaBehind: a key claimed and released
// on a master, the release on its replica, whose clock is 50 ms (then 5 s)
// behind; the master killed, the replica promoted at once (REPLICAOF NO
// ONE) and the client's connections moved to it: the key's next claim,
// through the same client, has a fence above the last. (On a busy machine
// more than 50 ms may pass from the release to that claim, and then even a
// store that keeps no floor passes the 50 ms step.)
func TestFenceGrowsAcrossPromotionOfReplicaBehind(t *testing.T) {
	for _, step := range []time.Duration{50 * time.Millisecond, 5 * time.Second} {
		t.Run(fmt.Sprintf("Behind%v", step), func(t *testing.T) {
			master := testenv.NewRedis(t, "--repl-diskless-sync-delay", "0")
			_, port, _ := net.SplitHostPort(master.Addr)
			clock := testenv.NewClock(t)
			clock.Set(-step)
			replica := testenv.NewRedisWithClock(t, clock, "--replicaof", "127.0.0.1", port)
			var target atomic.Value
			target.Store(master.Addr)
			c := nodeClient(t, master.Addr, func(o *redis.Options) {
				o.Dialer = func(ctx context.Context, network, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, network, target.Load().(string))
				}
			})
			st := newStore(t, c)
			k := t.Name()
			awaitLink(t, replica.Addr)
			last := claimAndRelease(t, st, k)
			awaitReplica(t, master.Addr)
			promote := nodeClient(t, replica.Addr)
			master.Stop(t)
			target.Store(replica.Addr)
			if err := promote.SlaveOf(t.Context(), "NO", "ONE").Err(); err != nil {
				t.Fatal(err)
			}
			next := claimEventually(t, st, k)
			if next.Fence <= last.Fence {
				t.Fatalf("after a promotion of a replica %v behind, the key's next claim has fence %v, not above its last %v (%d lower)",
					step, next.Fence, last.Fence, int64(last.Fence)-int64(next.Fence))
			}
		})
	}
}

// TestFenceGrowsAfterRestartWithClockBehind: a key claimed and released on
// a single node with an AOF, then the node restarted with its clock 5 s
// behind: the key's next claim has a fence above the last; released, and
// the clock stepped back 5 s more while the node runs, the one after too.
func TestFenceGrowsAfterRestartWithClockBehind(t *testing.T) {
	clock := testenv.NewClock(t)
	srv := testenv.NewRedisWithClock(t, clock)
	st := newStore(t, nodeClient(t, srv.Addr))
	k := t.Name()
	last := claimEventually(t, st, k)
	for i, step := range []func(){
		func() { clock.Set(-5 * time.Second); srv.Restart(t) },
		func() { clock.Step(-5 * time.Second) },
	} {
		time.Sleep(5 * time.Millisecond) // the server's clock passes the fence
		if ok, err := st.Release(t.Context(), k, last.Fence); err != nil || !ok {
			t.Fatalf("Release: %v, %v", ok, err)
		}
		step()
		next := claimEventually(t, st, k)
		if next.Fence <= last.Fence {
			t.Fatalf("step %d: after the clock went back 5 s, the key's next claim has fence %v, not above its last %v (%d lower)",
				i+1, next.Fence, last.Fence, int64(last.Fence)-int64(next.Fence))
		}
		last = next
	}
}

// claimAndRelease claims the free key k and releases the claim once the
// server's clock has passed its fence.
func claimAndRelease(t *testing.T, st *redisstore.Store, k string) store.Record {
	t.Helper()
	c := claimEventually(t, st, k)
	time.Sleep(5 * time.Millisecond)
	if ok, err := st.Release(t.Context(), k, c.Fence); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	return c
}

// awaitLink returns once the replica at addr is linked to its master.
func awaitLink(t *testing.T, addr string) {
	t.Helper()
	c := nodeClient(t, addr)
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := c.Info(t.Context(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica %s is not linked to its master 30 s on: %v %s", addr, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// claimEventually claims the free key k, retrying the errors of a client
// that follows a failover or a restart.
func claimEventually(t *testing.T, st *redisstore.Store, k string) store.Record {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		rec, claimed, err := st.Claim(ctx, k, "fp", time.Minute)
		cancel()
		if err == nil {
			if !claimed {
				t.Fatalf("Claim of a free key refused: %+v", rec)
			}
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("Claim still fails 30 s on: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitReplica returns once the replica of the master at addr has every
// write made so far: WAIT counts the writes of its own connection, and
// replication keeps their order.
func awaitReplica(t *testing.T, addr string) {
	t.Helper()
	conn := nodeClient(t, addr).Conn()
	defer conn.Close()
	if err := conn.Set(t.Context(), prefix(t)+"mark", "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := conn.Do(t.Context(), "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 5000 on %s: %v, %v; want 1", addr, n, err)
	}
}

// wantBehind fails unless the clock of the server at addr (TIME) is at
// least d behind the test's.
func wantBehind(t *testing.T, addr string, d time.Duration) {
	t.Helper()
	now, err := nodeClient(t, addr).Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if lag := time.Since(now); lag < d {
		t.Fatalf("the clock of %s is %v behind; want at least %v", addr, lag, d)
	}
}
