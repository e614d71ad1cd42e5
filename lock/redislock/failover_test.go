package redislock_test

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/redis/go-redis/v9"
)

// The failover tests run lock.Do under load on a replicated deployment
// while its masters are killed (SIGKILL) one after another, in two modes at
// once on disjoint keys:
//
//   - "wait", with WithWaitForReplicas(1, …): every lease and every
//     extension was acknowledged by the replica that a failover promotes,
//     so no failover loses one. The tests assert that no two holders ever
//     held a key at once and that a key's fences grew from each holder to
//     the next.
//   - "plain", without it: a failover can lose the last writes of the dead
//     master (a lease, an extension, a release), and the tests only measure
//     how often two holders overlapped or a fence went back.
//
// In both modes, after each failover every key is taken again within a
// bound (the recovery), and every lock.Do returns within a bound: no call
// hangs on a dead master.

const (
	failovers = 5
	// replicaLag is how long the replica that takes over lags behind its
	// master before each kill (testenv.ReplicaLag): what the master
	// acknowledged in that time without the replica is lost.
	replicaLag      = 300 * time.Millisecond
	failoverTTL     = 8 * time.Second
	failoverKeys    = 8                // hot keys per mode
	failoverWorkers = 4                // goroutines per locker
	recoveryBound   = 30 * time.Second // after a failover, until every key was taken again
	doBound         = 30 * time.Second // the longest a lock.Do call may take
)

// quietDials makes go-redis, while a failover test runs, leave out its
// log lines about connections it could not dial (to a killed master, by
// the hundred), so that a failure's log shows what matters; other lines,
// and every line outside the failover tests, are logged as go-redis
// would.
func quietDials(t *testing.T) {
	dialLogger.once.Do(func() {
		dialLogger.out = log.New(os.Stderr, "redis: ", log.LstdFlags)
		redis.SetLogger(&dialLogger)
	})
	dialLogger.quiet.Add(1)
	t.Cleanup(func() { dialLogger.quiet.Add(-1) })
}

var dialLogger quietDialLogger

type quietDialLogger struct {
	once  sync.Once
	out   *log.Logger
	quiet atomic.Int32 // failover tests running
}

func (l *quietDialLogger) Printf(_ context.Context, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if l.quiet.Load() > 0 && strings.Contains(msg, "failed to dial") {
		return
	}
	l.out.Print(msg)
}

// failoverMode is one mode of a failover test: two Lockers (on clients of
// their own, with the same options and key prefix) whose workers take the
// mode's hot keys in turn.
type failoverMode struct {
	name    string
	wait    bool // WithWaitForReplicas: the mode whose safety is asserted
	lockers [2]*redislock.Locker
	keys    []string

	cycles      atomic.Int64 // lock.Do calls that ran fn
	errs        atomic.Int64 // lock.Do calls that failed (retried)
	releaseErrs atomic.Int64 // releases that failed after fn
	maxDo       atomic.Int64 // the longest lock.Do call, in ns

	mu          sync.Mutex
	holders     map[string]int           // the key's holders inside fn now
	fences      map[string]idemkit.Fence // the key's greatest fence so far
	entries     map[string][]time.Time   // when fn was entered, per key, in order
	overlaps    int                      // entries into fn while another holder of the key was inside
	regressions int                      // entries into fn with a fence not above the key's greatest
	recoveries  []time.Duration          // per failover
	lastErr     error                    // the last lock.Do error, for the log
}

// newFailoverMode makes a mode with lockers on the clients newClient makes
// (one each) and opts.
func newFailoverMode(t *testing.T, name string, wait bool, newClient func() redis.UniversalClient, opts ...redislock.Option) *failoverMode {
	t.Helper()
	m := &failoverMode{
		name: name, wait: wait,
		holders: map[string]int{}, fences: map[string]idemkit.Fence{}, entries: map[string][]time.Time{},
	}
	m.lockers[0] = newLocker(t, newClient(), opts...)
	m.lockers[1] = newLocker(t, newClient(), append([]redislock.Option{redislock.WithKeyPrefix(redislock.Prefix(m.lockers[0]))}, opts...)...)
	return m
}

// hold is fn of the workers' lock.Do: it counts an overlap when another
// holder of the key is inside fn, and a fence regression when the lease's
// fence is not above every fence the key had, then holds the key for
// 10-20 ms, or one time in five for 1-3 s, past a failover (less when
// lock.Do cancels ctx: the lease is lost).
func (m *failoverMode) hold(ctx context.Context, lease lock.Lease) error {
	m.mu.Lock()
	m.holders[lease.Key]++
	if m.holders[lease.Key] > 1 {
		m.overlaps++
	}
	if lease.Fence <= m.fences[lease.Key] {
		m.regressions++
	} else {
		m.fences[lease.Key] = lease.Fence
	}
	m.entries[lease.Key] = append(m.entries[lease.Key], time.Now())
	m.mu.Unlock()

	hold := time.Duration(10+rand.IntN(11)) * time.Millisecond
	if rand.IntN(5) == 0 {
		// A long hold, past a failover: a lease the failover lost lets
		// another holder in while this one still works.
		hold = time.Duration(1000+rand.IntN(2001)) * time.Millisecond
	}
	timer := time.NewTimer(hold)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
	}

	m.mu.Lock()
	m.holders[lease.Key]--
	m.mu.Unlock()
	return nil
}

// work runs lock.Do on l in a loop on random keys of the mode until ctx
// ends; a failed call (ServiceUnavailable while a master is down, a lost
// lease) is counted and retried after a pause.
func (m *failoverMode) work(ctx context.Context, l *redislock.Locker) {
	onRelease := lock.WithOnReleaseError(func(lock.ReleaseFailure) { m.releaseErrs.Add(1) })
	for ctx.Err() == nil {
		key := m.keys[rand.IntN(len(m.keys))]
		start := time.Now()
		err := lock.Do(ctx, l, key, m.hold, lock.WithTTL(failoverTTL), lock.WithTimeout(5*time.Second), onRelease)
		took := time.Since(start)
		for {
			prev := m.maxDo.Load()
			if int64(took) <= prev || m.maxDo.CompareAndSwap(prev, int64(took)) {
				break
			}
		}
		if err == nil {
			m.cycles.Add(1)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		m.errs.Add(1)
		m.mu.Lock()
		m.lastErr = err
		m.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

// recovered returns, once every key of the mode was taken after promoted,
// how long after killed the last of them first was; ok is false before.
func (m *failoverMode) recovered(killed, promoted time.Time) (d time.Duration, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range m.keys {
		e := m.entries[k]
		i, _ := slices.BinarySearchFunc(e, promoted, func(x, p time.Time) int { return x.Compare(p) })
		if i == len(e) {
			return 0, false
		}
		d = max(d, e[i].Sub(killed))
	}
	return d, true
}

// failoverRun runs the workers of modes, does failovers (each calls fail
// once, returning the testenv's result), and after each one waits until
// every mode has taken every key again. Then it stops the workers (which
// must all return within doBound), logs one line per mode and asserts the
// safety of the modes with a wait.
func failoverRun(t *testing.T, modes []*failoverMode, fail func(i int) testenv.FailoverResult) {
	quietDials(t)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	stopped := false
	stopWorkers := func() {
		if stopped {
			return
		}
		stopped = true
		stop()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(doBound):
			t.Errorf("the workers did not return within %v of the end: a lock.Do call hangs", doBound)
		}
	}
	t.Cleanup(stopWorkers) // also when a failover fails the test
	for _, m := range modes {
		for _, l := range m.lockers {
			for range failoverWorkers {
				wg.Go(func() { m.work(ctx, l) })
			}
		}
	}

	// Every mode takes every key before the first failover.
	start := time.Now()
	for _, m := range modes {
		waitRecovered(t, m, start, start)
	}
	for i := range failovers {
		killed := time.Now()
		r := fail(i)
		promoted := killed.Add(r.Promoted)
		line := fmt.Sprintf("failover %d: killed %s, new master %s, promoted after %v, replica back after %v; recovered after",
			i+1, r.Killed, r.NewMaster, r.Promoted.Round(time.Millisecond), r.Rejoined.Round(time.Millisecond))
		for _, m := range modes {
			d := waitRecovered(t, m, killed, promoted)
			m.recoveries = append(m.recoveries, d)
			line += fmt.Sprintf(" %s %v", m.name, d.Round(time.Millisecond))
		}
		t.Log(line)
	}
	stopWorkers()

	for _, m := range modes {
		m.mu.Lock()
		maxRecovery := slices.Max(m.recoveries)
		t.Logf("%s: failovers %d, cycles %d, overlaps %d, fence regressions %d, max recovery %v (errors %d, failed releases %d, longest lock.Do %v, last error: %v)",
			m.name, len(m.recoveries), m.cycles.Load(), m.overlaps, m.regressions, maxRecovery.Round(time.Millisecond),
			m.errs.Load(), m.releaseErrs.Load(), time.Duration(m.maxDo.Load()).Round(time.Millisecond), m.lastErr)
		if m.wait && (m.overlaps != 0 || m.regressions != 0) {
			t.Errorf("%s: %d overlaps and %d fence regressions; with the wait for a replica a failover must lose no lease", m.name, m.overlaps, m.regressions)
		}
		if d := time.Duration(m.maxDo.Load()); d > doBound {
			t.Errorf("%s: a lock.Do call took %v; want every call back within %v", m.name, d, doBound)
		}
		m.mu.Unlock()
	}
}

// waitRecovered waits (at most recoveryBound) until every key of m was
// taken after promoted, and returns how long after killed the last was.
func waitRecovered(t *testing.T, m *failoverMode, killed, promoted time.Time) time.Duration {
	t.Helper()
	deadline := time.Now().Add(recoveryBound)
	for {
		if d, ok := m.recovered(killed, promoted); ok {
			return d
		}
		if time.Now().After(deadline) {
			m.mu.Lock()
			err := m.lastErr
			m.mu.Unlock()
			t.Fatalf("%s: some key was not taken again within %v of the failover (cycles %d, errors %d, last error: %v)",
				m.name, recoveryBound, m.cycles.Load(), m.errs.Load(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFailoverSentinelLosesNoLeaseWithWait: a master and a replica under
// three Sentinels, clients that follow the Sentinels
// (redis.NewFailoverClient); five failovers under load. With the wait no
// failover lets two holders in at once or a fence go back; without it the
// overlaps and regressions are logged.
func TestFailoverSentinelLosesNoLeaseWithWait(t *testing.T) {
	s := testenv.NewSentinel(t)
	newClient := func() redis.UniversalClient {
		c := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs, ContextTimeoutEnabled: true,
		})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	modes := []*failoverMode{
		newFailoverMode(t, "plain", false, newClient),
		newFailoverMode(t, "wait", true, newClient, redislock.WithWaitForReplicas(1, 500*time.Millisecond)),
	}
	for _, m := range modes {
		for i := range failoverKeys {
			m.keys = append(m.keys, fmt.Sprintf("%s-hot-%d", m.name, i))
		}
	}
	failoverRun(t, modes, func(int) testenv.FailoverResult { return s.Failover(t, testenv.ReplicaLag(replicaLag)) })
}

// TestFailoverReplicatedClusterLosesNoLeaseWithWait: a cluster of three
// masters with a replica each, cluster clients; five failovers under load,
// killing the masters in turn, each of which serves some of every mode's
// keys. With the wait no failover lets two holders in at once or a fence
// go back; without it the overlaps and regressions are logged.
func TestFailoverReplicatedClusterLosesNoLeaseWithWait(t *testing.T) {
	c := testenv.NewReplicatedCluster(t)
	newClient := func() redis.UniversalClient {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true, MaintNotificationsConfig: noMaintNotifications()})
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	modes := []*failoverMode{
		newFailoverMode(t, "plain", false, newClient),
		newFailoverMode(t, "wait", true, newClient, redislock.WithWaitForReplicas(1, 500*time.Millisecond)),
	}
	// Keys spread over the three masters (3, 3 and 2), so that every
	// failover takes some of every mode's keys down.
	masters := c.Masters(t)
	for _, m := range modes {
		per := map[string]int{}
		for i := 0; len(m.keys) < failoverKeys; i++ {
			if i > 1000 {
				t.Fatalf("%s: no keys spread over the masters %v: %v", m.name, masters, per)
			}
			k := fmt.Sprintf("%s-hot-%d", m.name, i)
			owner := c.MasterOf(t, redislock.LockName(m.lockers[0], k))
			if per[owner] < (failoverKeys+len(masters)-1)/len(masters) {
				per[owner]++
				m.keys = append(m.keys, k)
			}
		}
	}
	failoverRun(t, modes, func(i int) testenv.FailoverResult {
		return c.FailoverMaster(t, c.Masters(t)[i%3], testenv.ReplicaLag(replicaLag))
	})
}
