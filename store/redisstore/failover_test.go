package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// The failover tests run guarded work on many keys at once through two
// guard instances (separate clients) while the Redis master is killed
// (SIGKILL) and a replica takes over, five times. They run two modes side
// by side on disjoint keys: plain, where a claim or an outcome that the
// master acknowledged and died with before its replica copied it is lost,
// and WithWaitForReplicas, where nothing counts before the replica has
// it. They check that the service recovers on its own after every
// failover and that no call hangs; that with the wait no key ran twice and
// no recorded outcome was lost; and they report both counts for the plain
// mode, which a failover may make non-zero.

const (
	failovers = 5
	// replicaLag is how long the replica that takes over lags behind its
	// master before each kill (testenv.ReplicaLag): what the master
	// acknowledged in that time without the replica is lost.
	replicaLag      = 300 * time.Millisecond
	keyWorkers      = 6                     // keys in flight per mode, each sent by two duplicates
	workTime        = 20 * time.Millisecond // how long the guarded work takes
	failoverOpLimit = time.Second           // the guards' op timeout
	ackTimeout      = 500 * time.Millisecond
	writeTimeout    = 15 * time.Second // the guards' record write timeout
	// hangLimit is far above the longest a call may take (a completion
	// retried for the record write timeout): a call past it hangs.
	hangLimit = writeTimeout + 10*failoverOpLimit
)

// failoverSetup is a replicated deployment: how to make a client of it,
// and how to fail over its master (or, on a cluster, the i-th failover's
// master), returning once the replica has taken over and the old master
// is back as a replica.
type failoverSetup struct {
	client   func(t *testing.T) redis.UniversalClient
	failover func(t *testing.T, i int) testenv.FailoverResult
}

func TestFailoverSentinel(t *testing.T) {
	s := testenv.NewSentinel(t)
	runFailovers(t, failoverSetup{
		client: func(t *testing.T) redis.UniversalClient {
			c := redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs, ContextTimeoutEnabled: true,
			})
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
		failover: func(t *testing.T, _ int) testenv.FailoverResult { return s.Failover(t, testenv.ReplicaLag(replicaLag)) },
	})
}

func TestFailoverReplicatedCluster(t *testing.T) {
	c := testenv.NewReplicatedCluster(t)
	runFailovers(t, failoverSetup{
		client: func(t *testing.T) redis.UniversalClient {
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true, MaintNotificationsConfig: noMaintNotifications()})
			t.Cleanup(func() { _ = cc.Close() })
			return cc
		},
		failover: func(t *testing.T, i int) testenv.FailoverResult {
			masters := c.Masters(t)
			return c.FailoverMaster(t, masters[i%len(masters)], testenv.ReplicaLag(replicaLag))
		},
	})
}

// failoverMode is one mode's guards and counts.
type failoverMode struct {
	name   string
	guards [2]*middleware.Guard
	stores [2]*redisstore.Store

	runs      sync.Map // key → *atomic.Int32: executions
	doneKeys  sync.Map // key → struct{}: a call got the key's outcome
	successes atomic.Int64
	errors    atomic.Int64
	longest   atomic.Int64 // the longest call, in ns
}

func runFailovers(t *testing.T, setup failoverSetup) {
	ctx := t.Context()
	var modes []*failoverMode
	for _, m := range []struct {
		name string
		opts []redisstore.Option
	}{
		{"plain", nil},
		{"wait", []redisstore.Option{redisstore.WithWaitForReplicas(1, ackTimeout)}},
	} {
		fm := &failoverMode{name: m.name}
		for i := range fm.guards {
			st, err := redisstore.New(setup.client(t), append([]redisstore.Option{redisstore.WithKeyPrefix(prefix(t))}, m.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			g, err := middleware.New(st, middleware.WithOpTimeout(failoverOpLimit), middleware.WithRecordWriteTimeout(writeTimeout))
			if err != nil {
				t.Fatal(err)
			}
			fm.guards[i], fm.stores[i] = g, st
		}
		modes = append(modes, fm)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, fm := range modes {
		for w := 0; w < keyWorkers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for seq := 0; ; seq++ {
					select {
					case <-stop:
						return
					default:
					}
					fm.storm(ctx, fmt.Sprintf("%s:%d:%d", fm.name, w, seq), stop)
				}
			}()
		}
	}

	progress := func(fm *failoverMode, after int64) bool {
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			if fm.successes.Load() > after {
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	}
	for _, fm := range modes {
		if !progress(fm, 0) {
			t.Fatalf("%s: no key completed before the first failover", fm.name)
		}
	}
	recovery := map[string]time.Duration{}
	var promoted, rejoined time.Duration
	for i := 0; i < failovers; i++ {
		time.Sleep(300 * time.Millisecond) // keys in flight when the master dies
		before := map[string]int64{}
		for _, fm := range modes {
			before[fm.name] = fm.successes.Load()
		}
		killed := time.Now()
		fr := setup.failover(t, i)
		promoted, rejoined = max(promoted, fr.Promoted), max(rejoined, fr.Rejoined)
		for _, fm := range modes {
			// Recovered: keys complete again. Keys that were past their
			// wait count too, so wait for a new one.
			if !progress(fm, before[fm.name]) {
				t.Fatalf("%s: no key completed within 60 s of failover %d", fm.name, i+1)
			}
			recovery[fm.name] = max(recovery[fm.name], time.Since(killed))
		}
	}
	close(stop)
	wg.Wait()

	t.Logf("%d failovers: a replica was master ≤ %v after the kill, the killed master back as a replica ≤ %v after it",
		failovers, promoted.Round(time.Millisecond), rejoined.Round(time.Millisecond))

	// Every key a call completed must still replay its outcome.
	check, err := middleware.New(newStore(t, setup.client(t)))
	if err != nil {
		t.Fatal(err)
	}
	for _, fm := range modes {
		keys, twice, lost := 0, 0, 0
		fm.doneKeys.Range(func(k, _ any) bool {
			keys++
			in, found, err := check.Inspect(ctx, "", k.(string), false)
			if err != nil {
				t.Errorf("%s: Inspect %s: %v", fm.name, k, err)
			} else if !found || !in.State.Done() {
				lost++
			}
			return true
		})
		fm.runs.Range(func(_, n any) bool {
			if n.(*atomic.Int32).Load() > 1 {
				twice++
			}
			return true
		})
		t.Logf("%s: %d failovers, %d keys completed, %d calls failed and were retried, %d keys executed twice, %d completed records lost, recovery ≤ %v after a kill, longest call %v",
			fm.name, failovers, keys, fm.errors.Load(), twice, lost, recovery[fm.name].Round(time.Millisecond), time.Duration(fm.longest.Load()).Round(time.Millisecond))
		if longest := time.Duration(fm.longest.Load()); longest > hangLimit {
			t.Errorf("%s: a call took %v; every call must return within %v", fm.name, longest, hangLimit)
		}
		if fm.name == "wait" && (twice != 0 || lost != 0) {
			t.Errorf("%s: %d keys executed twice and %d completed records were lost; with the wait for replicas, want none", fm.name, twice, lost)
		}
	}
}

// storm sends key through both guards at once, each retrying until it has
// the outcome, as clients retrying a request do.
func (fm *failoverMode) storm(ctx context.Context, key string, stop <-chan struct{}) {
	runs := new(atomic.Int32)
	fm.runs.Store(key, runs)
	work := func(context.Context) (string, error) {
		runs.Add(1)
		time.Sleep(workTime)
		return "done " + key, nil
	}
	var wg sync.WaitGroup
	for _, g := range fm.guards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				start := time.Now()
				out, _, err := middleware.Do(ctx, g, key, key, work)
				took := time.Since(start)
				for {
					if l := fm.longest.Load(); int64(took) <= l || fm.longest.CompareAndSwap(l, int64(took)) {
						break
					}
				}
				if err == nil && out == "done "+key {
					fm.doneKeys.Store(key, struct{}{})
					fm.successes.Add(1)
					return
				}
				fm.errors.Add(1)
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
}
