package redislock_test

import (
	"context"
	"fmt"
	"strconv"
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

// deployment is a server set-up for the watch tests: a client whose
// connections carry a name of the test's own (so that its pub/sub
// connections can be told apart in CLIENT LIST), and the addresses of
// every node.
type deployment struct {
	name   string
	addrs  []string
	client func(t *testing.T, clientName string) redis.UniversalClient
}

func deployments(t *testing.T) []deployment {
	return []deployment{
		{"single", []string{testenv.Redis(t).Addr}, func(t *testing.T, name string) redis.UniversalClient {
			c := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr, ContextTimeoutEnabled: true, ClientName: name})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}},
		{"cluster", testenv.RedisCluster(t).Addrs, func(t *testing.T, name string) redis.UniversalClient {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisCluster(t).Addrs, ContextTimeoutEnabled: true, ClientName: name})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}},
	}
}

// clientName is a name for the connections of one test's locker.
func clientName(t *testing.T) string {
	return strings.NewReplacer("/", "-", " ", "-").Replace(testenv.Name(t))
}

// pubsubClients returns the ids of the pub/sub connections named name on
// each of addrs.
func pubsubClients(t *testing.T, addrs []string, name string) map[string][]string {
	t.Helper()
	out := make(map[string][]string)
	for _, addr := range addrs {
		list, err := admin(t, addr).ClientList(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
			f := fields(line)
			if f["name"] == name && (f["sub"] != "0" || f["ssub"] != "0" || strings.Contains(f["flags"], "P")) {
				out[addr] = append(out[addr], f["id"])
			}
		}
	}
	return out
}

func countClients(m map[string][]string) int {
	n := 0
	for _, ids := range m {
		n += len(ids)
	}
	return n
}

func fields(line string) map[string]string {
	f := make(map[string]string)
	for _, kv := range strings.Fields(line) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			f[k] = v
		}
	}
	return f
}

var (
	adminsMu sync.Mutex
	admins   = map[string]*redis.Client{}
)

// admin returns a client of the node at addr for the test's own commands.
func admin(t *testing.T, addr string) *redis.Client {
	adminsMu.Lock()
	defer adminsMu.Unlock()
	if c := admins[addr]; c != nil {
		return c
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	admins[addr] = c
	return c
}

// subscribers returns how many connections listen on the channel of key's
// lock record, on whichever node of addrs holds it.
func subscribers(t *testing.T, d deployment, l *redislock.Locker, key string) int64 {
	t.Helper()
	ch := redislock.LockName(l, key)
	var total int64
	for _, addr := range d.addrs {
		c := admin(t, addr)
		var (
			m   map[string]int64
			err error
		)
		if d.name == "cluster" {
			m, err = c.PubSubShardNumSub(t.Context(), ch).Result()
			if err != nil && strings.HasPrefix(err.Error(), "MOVED") {
				continue
			}
		} else {
			m, err = c.PubSubNumSub(t.Context(), ch).Result()
		}
		if err != nil {
			t.Fatal(err)
		}
		total += m[ch]
	}
	return total
}

// eventually polls cond until it holds, failing the test after a generous
// bound (a guard against hanging, not a timing assertion).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// slowPoll is a back-off whose first poll comes 2.5 s at the earliest:
// a waiter that has the lock sooner after a release was woken by the
// release's notification.
var slowPoll = idemkit.Backoff{Base: 5 * time.Second, Max: 5 * time.Second}

// wokenByNotification is the bound that polling with slowPoll cannot meet.
const wokenByNotification = 2500 * time.Millisecond

// doAsync runs lock.Do on key in a goroutine; the channel receives the
// time fn started (or the zero time) and Do's error.
type doResult struct {
	at  time.Time
	err error
}

func doAsync(ctx context.Context, l lock.Locker, key string, opts ...lock.Option) <-chan doResult {
	out := make(chan doResult, 1)
	go func() {
		var at time.Time
		err := lock.Do(ctx, l, key, func(context.Context, lock.Lease) error {
			at = time.Now()
			return nil
		}, append([]lock.Option{lock.WithTTL(time.Minute), lock.WithRenewInterval(-1)}, opts...)...)
		out <- doResult{at, err}
	}()
	return out
}

// TestWatchWakesWaiter: a lock.Do waiter whose poll back-off is far above
// the delay is woken by the release's notification: it holds the lock
// sooner after the release than its first poll could come. The release
// goes through another locker with its own client (another process), so
// that only the message can tell the waiter.
func TestWatchWakesWaiter(t *testing.T) {
	for _, d := range deployments(t) {
		t.Run(d.name, func(t *testing.T) {
			ctx := t.Context()
			l := newLocker(t, d.client(t, clientName(t)))
			holder := newLockerPrefixed(t, d.client(t, clientName(t)+"-holder"), redislock.Prefix(l))
			lease, ok, err := holder.Acquire(ctx, "k", time.Minute)
			if err != nil || !ok {
				t.Fatalf("Acquire: %v, %v", ok, err)
			}
			res := doAsync(ctx, l, "k", lock.WithBackoff(slowPoll), lock.WithTimeout(10*time.Second))
			eventually(t, "the waiter's watch is in place", func() bool { return subscribers(t, d, l, "k") == 1 })
			released := time.Now()
			if out, err := holder.ReleaseKey(ctx, lease.Key, lease.ID); err != nil || !out.OK {
				t.Fatalf("ReleaseKey: %+v, %v", out, err)
			}
			r := <-res
			if r.err != nil {
				t.Fatalf("Do: %v", r.err)
			}
			if took := r.at.Sub(released); took >= wokenByNotification {
				t.Fatalf("the waiter had the lock %v after the release; polling alone takes %v at least", took, wokenByNotification)
			}
		})
	}
}

// TestWatchLostNotification: when the listener's connection is killed and
// no new subscription can be made (the server refuses SUBSCRIBE), the
// waiter is woken once, falls back to polling and gets the lock within its
// budget although the release's message reached nobody. Once the server
// accepts subscriptions again, a later waiter is woken by notification.
func TestWatchLostNotification(t *testing.T) {
	for _, d := range deployments(t) {
		t.Run(d.name, func(t *testing.T) {
			ctx := t.Context()
			name := clientName(t)
			l := newLocker(t, d.client(t, name))
			holder := newLockerPrefixed(t, d.client(t, name+"-holder"), redislock.Prefix(l))
			deny := "-subscribe"
			if d.name == "cluster" {
				deny = "-ssubscribe"
			}
			setACL := func(rule string) {
				for _, addr := range d.addrs {
					if err := admin(t, addr).Do(context.Background(), "ACL", "SETUSER", "default", rule).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			t.Cleanup(func() { setACL("+" + deny[1:]) })

			lease, ok, err := holder.Acquire(ctx, "k", time.Minute)
			if err != nil || !ok {
				t.Fatalf("Acquire: %v, %v", ok, err)
			}
			res := doAsync(ctx, l, "k", lock.WithBackoff(idemkit.Backoff{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond}),
				lock.WithTimeout(20*time.Second))
			eventually(t, "the waiter's watch is in place", func() bool { return subscribers(t, d, l, "k") == 1 })
			for _, addr := range d.addrs {
				if err := admin(t, addr).Do(ctx, "ACL", "LOG", "RESET").Err(); err != nil {
					t.Fatal(err)
				}
			}
			setACL(deny)
			for addr, ids := range pubsubClients(t, d.addrs, name) {
				for _, id := range ids {
					if err := admin(t, addr).Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			// The waiter, woken by the failure, watches again: its
			// subscription is refused.
			eventually(t, "a new subscription was refused", func() bool { return refused(t, d.addrs, name, deny[1:]) })
			if out, err := holder.ReleaseKey(ctx, lease.Key, lease.ID); err != nil || !out.OK {
				t.Fatalf("ReleaseKey: %+v, %v", out, err)
			}
			if n := subscribers(t, d, l, "k"); n != 0 {
				t.Fatalf("%d subscribers at the release; want the notification lost", n)
			}
			if r := <-res; r.err != nil {
				t.Fatalf("Do after a lost notification: %v; want the lock by polling", r.err)
			}

			// The listener comes back once subscriptions are allowed again.
			setACL("+" + deny[1:])
			lease, ok, err = holder.Acquire(ctx, "k2", time.Minute)
			if err != nil || !ok {
				t.Fatalf("Acquire: %v, %v", ok, err)
			}
			res = doAsync(ctx, l, "k2", lock.WithBackoff(slowPoll), lock.WithTimeout(30*time.Second))
			eventually(t, "a new listener subscribed", func() bool { return subscribers(t, d, l, "k2") == 1 })
			released := time.Now()
			if out, err := holder.ReleaseKey(ctx, lease.Key, lease.ID); err != nil || !out.OK {
				t.Fatalf("ReleaseKey: %+v, %v", out, err)
			}
			r := <-res
			if r.err != nil {
				t.Fatalf("Do: %v", r.err)
			}
			if took := r.at.Sub(released); took >= wokenByNotification {
				t.Fatalf("after the listener came back, the waiter had the lock %v after the release; polling alone takes %v at least", took, wokenByNotification)
			}
		})
	}
}

// TestWatchKilledListenerWakesAll: killing the listener's connection (no
// refusal after it) wakes every waiter once; they watch again through a
// new connection and a later release wakes them by notification.
func TestWatchKilledListenerWakesAll(t *testing.T) {
	for _, d := range deployments(t) {
		t.Run(d.name, func(t *testing.T) {
			ctx := t.Context()
			name := clientName(t)
			l := newLocker(t, d.client(t, name))
			holder := newLockerPrefixed(t, d.client(t, name+"-holder"), redislock.Prefix(l))
			lease, ok, err := holder.Acquire(ctx, "k", time.Minute)
			if err != nil || !ok {
				t.Fatalf("Acquire: %v, %v", ok, err)
			}
			ch, stop := l.Watch(ctx, "k")
			defer stop()
			before := pubsubClients(t, d.addrs, name)
			if countClients(before) == 0 {
				t.Fatal("no pub/sub connection after a watch")
			}
			for addr, ids := range before {
				for _, id := range ids {
					if err := admin(t, addr).Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			select {
			case <-ch:
			case <-time.After(30 * time.Second):
				t.Fatal("killing the listener's connection did not wake the watch")
			}
			res := doAsync(ctx, l, "k", lock.WithBackoff(slowPoll), lock.WithTimeout(10*time.Second))
			eventually(t, "a new listener subscribed", func() bool { return subscribers(t, d, l, "k") == 1 })
			after := pubsubClients(t, d.addrs, name)
			for addr, ids := range before {
				for _, id := range ids {
					for _, again := range after[addr] {
						if id == again {
							t.Fatalf("connection %s of %s still listens after CLIENT KILL", id, addr)
						}
					}
				}
			}
			released := time.Now()
			if out, err := holder.ReleaseKey(ctx, lease.Key, lease.ID); err != nil || !out.OK {
				t.Fatalf("ReleaseKey: %+v, %v", out, err)
			}
			r := <-res
			if r.err != nil {
				t.Fatalf("Do: %v", r.err)
			}
			if took := r.at.Sub(released); took >= wokenByNotification {
				t.Fatalf("the waiter had the lock %v after the release; polling alone takes %v at least", took, wokenByNotification)
			}
		})
	}
}

// TestWatchConnectionsConstant: 1000 waiters on 50 keys share one pub/sub
// connection per node that holds a watched key (one on a single node, at
// most one per master on a cluster), and all of them get the lock once the
// holders (another process) release.
func TestWatchConnectionsConstant(t *testing.T) {
	const keys, perKey = 50, 20
	for _, d := range deployments(t) {
		t.Run(d.name, func(t *testing.T) {
			ctx := t.Context()
			name := clientName(t)
			l := newLocker(t, d.client(t, name))
			holder := newLockerPrefixed(t, d.client(t, name+"-holder"), redislock.Prefix(l))
			key := func(i int) string { return "k" + strconv.Itoa(i%keys) }
			leases := make([]lock.Lease, keys)
			for i := range keys {
				lease, ok, err := holder.Acquire(ctx, key(i), time.Minute)
				if err != nil || !ok {
					t.Fatalf("Acquire: %v, %v", ok, err)
				}
				leases[i] = lease
			}

			var (
				wg                 sync.WaitGroup
				ran, inside, worst atomic.Int64
				errs               = make(chan error, keys*perKey)
			)
			for i := range keys * perKey {
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := lock.Do(ctx, l, key(i), func(context.Context, lock.Lease) error {
						ran.Add(1)
						return nil
					}, lock.WithTTL(time.Minute), lock.WithRenewInterval(-1),
						lock.WithBackoff(idemkit.Backoff{Base: time.Second, Max: 2 * time.Second}), lock.WithTimeout(2*time.Minute))
					if err != nil {
						errs <- err
					}
				}()
			}
			sample := func() {
				n := int64(countClients(pubsubClients(t, d.addrs, name)))
				inside.Store(n)
				for {
					w := worst.Load()
					if n <= w || worst.CompareAndSwap(w, n) {
						break
					}
				}
			}
			eventually(t, "every key is watched", func() bool {
				for i := range keys {
					if subscribers(t, d, l, key(i)) != 1 {
						return false
					}
				}
				return true
			})
			sample()
			masters := int64(len(d.addrs))
			if n := inside.Load(); n < 1 || n > masters {
				t.Fatalf("%d pub/sub connections for %d waiters; want 1 to %d", n, keys*perKey, masters)
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			for _, lease := range leases {
				if out, err := holder.ReleaseKey(ctx, lease.Key, lease.ID); err != nil || !out.OK {
					t.Fatalf("ReleaseKey: %+v, %v", out, err)
				}
			}
			for waiting := true; waiting; {
				select {
				case <-done:
					waiting = false
				case <-time.After(20 * time.Millisecond):
					sample()
				}
			}
			close(errs)
			for err := range errs {
				t.Fatalf("Do: %v", err)
			}
			if got := ran.Load(); got != keys*perKey {
				t.Fatalf("fn ran %d times; want %d", got, keys*perKey)
			}
			if w := worst.Load(); w > masters {
				t.Fatalf("up to %d pub/sub connections; want at most %d", w, masters)
			}
		})
	}
}

// TestWatchMutualExclusion: two lockers with clients of their own (two
// processes), 16 goroutines each, take turns on one key through lock.Do
// with notifications; fn never runs twice at once and every call gets the
// lock.
func TestWatchMutualExclusion(t *testing.T) {
	for _, d := range deployments(t) {
		t.Run(d.name, func(t *testing.T) {
			ctx := t.Context()
			a := newLocker(t, d.client(t, clientName(t)+"-a"))
			b := newLockerPrefixed(t, d.client(t, clientName(t)+"-b"), redislock.Prefix(a))
			var (
				wg          sync.WaitGroup
				inside, ran atomic.Int64
				overlap     atomic.Bool
				errs        = make(chan error, 32*10)
			)
			for g := range 32 {
				l := a
				if g%2 == 1 {
					l = b
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 10 {
						err := lock.Do(ctx, l, "shared", func(context.Context, lock.Lease) error {
							if inside.Add(1) != 1 {
								overlap.Store(true)
							}
							time.Sleep(time.Millisecond)
							ran.Add(1)
							inside.Add(-1)
							return nil
						}, lock.WithTTL(time.Minute), lock.WithRenewInterval(-1),
							lock.WithBackoff(idemkit.Backoff{Base: 50 * time.Millisecond, Max: time.Second}), lock.WithTimeout(time.Minute))
						if err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("Do: %v", err)
			}
			if overlap.Load() {
				t.Fatal("fn ran twice at once")
			}
			if got := ran.Load(); got != 320 {
				t.Fatalf("fn ran %d times; want 320", got)
			}
		})
	}
}

// TestWatchChannel: Watch's channel is closed at once for a key that is
// not held and for an invalid key; for a held key it stays open until the
// lease ends: released, released after it expired, or extended after it
// expired (all by another process); stop is idempotent, and a stopped
// watch does not fire.
func TestWatchChannel(t *testing.T) {
	for _, d := range deployments(t) {
		t.Run(d.name, func(t *testing.T) {
			ctx := t.Context()
			l := newLocker(t, d.client(t, clientName(t)))
			other := newLockerPrefixed(t, d.client(t, clientName(t)+"-other"), redislock.Prefix(l))
			for _, k := range []string{"free", ""} {
				ch, stop := l.Watch(ctx, k)
				if !closed(ch) {
					t.Fatalf("Watch(%q): not closed; want closed at once (the key is not held)", k)
				}
				stop()
			}

			for _, end := range []string{"release", "release after expiry", "extend after expiry"} {
				ttl := time.Minute
				if end != "release" {
					ttl = 300 * time.Millisecond
					raiseFence(t, d.client(t, clientName(t)+"-admin"), l, end)
				}
				lease, ok, err := other.Acquire(ctx, end, ttl)
				if err != nil || !ok {
					t.Fatalf("Acquire: %v, %v", ok, err)
				}
				acquired := time.Now()
				ch, stop := l.Watch(ctx, end)
				gone, stopGone := l.Watch(ctx, end)
				stopGone()
				stopGone()
				// (On a slow machine a short lease may run out during the
				// watch's setup: then the watch rightly fires at once.)
				if closed(ch) && time.Since(acquired) < ttl {
					t.Fatalf("%s: the watch fired while the key is held", end)
				}
				if ttl < time.Minute {
					time.Sleep(2 * ttl)
				}
				var out lock.Outcome
				if end == "extend after expiry" {
					out, err = other.ExtendKey(ctx, lease.Key, lease.ID, time.Minute)
				} else {
					out, err = other.ReleaseKey(ctx, lease.Key, lease.ID)
				}
				if err != nil || (end == "release") != out.OK || end != "release" && out.Reason != lock.ReasonExpired {
					t.Fatalf("%s: %+v, %v", end, out, err)
				}
				select {
				case <-ch:
				case <-time.After(30 * time.Second):
					t.Fatalf("%s: the watch did not fire", end)
				}
				if closed(gone) {
					t.Fatalf("%s: a stopped watch fired", end)
				}
				stop()
				stop()
			}
		})
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestNotifications pins what the scripts publish: the end of a watched
// lease (a release, a release or extend that finds it expired) sends its
// lock id on the channel named like its lock record (sharded on a
// cluster), and so does IsLocked's cleanup; a lease nobody watches ends
// without a message, and an acquire, an extend and a refused release send
// nothing. A Watch marks the lease it finds, and so does an acquire
// refused while its Locker watches the key; an extend and a takeover of a
// watched lease that ran out keep the mark.
func TestNotifications(t *testing.T) {
	for _, d := range deployments(t) {
		t.Run(d.name, func(t *testing.T) {
			ctx := t.Context()
			c := d.client(t, clientName(t))
			l := newLocker(t, c, redislock.WithCleanupInIsLocked(true))
			// Another process's locker, which watches the key.
			other := newLockerPrefixed(t, d.client(t, clientName(t)+"-other"), redislock.Prefix(l))
			name := redislock.LockName(l, "k")
			var ps *redis.PubSub
			if cc, ok := c.(*redis.ClusterClient); ok {
				ps = cc.SSubscribe(ctx, name)
			} else {
				ps = c.(*redis.Client).Subscribe(ctx, name)
			}
			defer ps.Close()
			if _, err := ps.Receive(ctx); err != nil { // the confirmation
				t.Fatal(err)
			}
			next := func(what string) string {
				t.Helper()
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				m, err := ps.ReceiveMessage(rctx)
				if err != nil {
					t.Fatalf("%s: no message: %v", what, err)
				}
				return m.Payload
			}
			watchedAs := func(want bool) {
				t.Helper()
				r, found, err := readRecord(ctx, c, name)
				if err != nil || !found || r.watched() != want {
					t.Fatalf("the record %+v (found %v, %v): watched %v; want %v", r, found, err, r.watched(), want)
				}
			}

			// Nobody watches: the release sends nothing.
			quiet, _, err := l.Acquire(ctx, "k", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if out, err := l.ReleaseKey(ctx, "k", quiet.ID); err != nil || !out.OK {
				t.Fatalf("ReleaseKey: %+v, %v", out, err)
			}

			// A Watch of another process marks the compact lease this locker
			// wrote: its release, which no longer finds the record as written,
			// sends the message.
			marked, _, err := l.Acquire(ctx, "k", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			_, stop := other.Watch(ctx, "k")
			stop()
			watchedAs(true)
			if out, err := l.ReleaseKey(ctx, "k", marked.ID); err != nil || !out.OK {
				t.Fatalf("ReleaseKey of a marked lease: %+v, %v", out, err)
			}
			if got := next("release of a marked lease"); got != marked.ID {
				t.Fatalf("the release of a marked lease sent %q; want its lock id %q (and nothing before it)", got, marked.ID)
			}

			// A Watch marks the lease; extends keep the mark.
			lease, _, err := l.Acquire(ctx, "k", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			watchedAs(false)
			_, stop = other.Watch(ctx, "k")
			stop()
			watchedAs(true)
			if _, err := l.ExtendKey(ctx, "k", lease.ID, time.Minute); err != nil {
				t.Fatal(err)
			}
			watchedAs(true)
			if out, err := l.ReleaseKey(ctx, "k", lock.NewID()); err != nil || out.OK {
				t.Fatalf("release with a foreign id: %+v, %v", out, err)
			}
			if out, err := l.ReleaseKey(ctx, "k", lease.ID); err != nil || !out.OK {
				t.Fatalf("ReleaseKey: %+v, %v", out, err)
			}
			if got := next("release"); got != lease.ID {
				t.Fatalf("release sent %q; want the watched lease's lock id %q (and nothing before it)", got, lease.ID)
			}

			// An acquire refused while its locker watches the key marks the
			// lease. The expired ones below are kept as full records (their
			// fence is ahead of the clock), so that a release or extend
			// finds them expired rather than gone.
			raiseFence(t, c, l, "k")
			for _, op := range []string{"release", "extend"} {
				lease, _, err = l.Acquire(ctx, "k", 30*time.Millisecond)
				if err != nil {
					t.Fatal(err)
				}
				if _, ok, err := other.Acquire(ctx, "k", time.Minute); ok || err != nil {
					t.Fatalf("Acquire of a held key: %v, %v", ok, err)
				}
				watchedAs(true)
				time.Sleep(100 * time.Millisecond)
				var out lock.Outcome
				if op == "release" {
					out, err = l.ReleaseKey(ctx, "k", lease.ID)
				} else {
					out, err = l.ExtendKey(ctx, "k", lease.ID, time.Minute)
				}
				if err != nil || out.OK || out.Reason != lock.ReasonExpired {
					t.Fatalf("%s of an expired lease: %+v, %v; want expired", op, out, err)
				}
				if got := next(op + " after expiry"); got != lease.ID {
					t.Fatalf("%s after expiry sent %q; want the lock id", op, got)
				}
			}
			// The last lease ran out while watched: the one that takes over
			// is watched too.
			if _, ok, err := l.Acquire(ctx, "k", time.Minute); !ok || err != nil {
				t.Fatalf("Acquire over an expired lease: %v, %v", ok, err)
			}
			watchedAs(true)

			// A record whose expiry an operator removed, expired long ago:
			// IsLocked's cleanup ends it and tells the watchers.
			now := serverNow(t, c)
			exp := now.Add(-lock.CleanupGrace - time.Second).UnixMilli()
			id := lock.NewID()
			if err := c.Set(ctx, name, rawRecord(id, 5, exp-1000, exp, "k"), 0).Err(); err != nil {
				t.Fatal(err)
			}
			if locked, err := l.IsLocked(ctx, "k"); err != nil || locked {
				t.Fatalf("IsLocked: %v, %v", locked, err)
			}
			if got := next("cleanup"); got != id {
				t.Fatalf("the cleanup sent %q; want the lock id %q", got, id)
			}
		})
	}
}

// refused reports whether a node of addrs refused the command cmd to a
// connection named name (ACL LOG).
func refused(t *testing.T, addrs []string, name, cmd string) bool {
	t.Helper()
	for _, addr := range addrs {
		entries, err := admin(t, addr).Do(t.Context(), "ACL", "LOG").Slice()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			s := strings.ToLower(fmt.Sprint(e))
			if strings.Contains(s, cmd) && strings.Contains(s, "name="+strings.ToLower(name)+" ") {
				return true
			}
		}
	}
	return false
}

// newLockerPrefixed is newLocker with the key prefix of another locker:
// the two see the same locks, as two processes would.
func newLockerPrefixed(t *testing.T, c redis.UniversalClient, prefix string, opts ...redislock.Option) *redislock.Locker {
	t.Helper()
	l, err := redislock.New(c, append([]redislock.Option{redislock.WithKeyPrefix(prefix)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

// raiseFence leaves a tombstone with a fence an hour ahead of the server's
// clock on key: the next lease's record outlives its expiry (it is kept
// until the clock passes its fence), so that a release or extend after
// the expiry finds it expired rather than gone.
func raiseFence(t *testing.T, c redis.UniversalClient, l *redislock.Locker, key string) {
	t.Helper()
	ahead := idemkit.Fence(serverNow(t, c).Add(time.Hour).UnixMilli())
	if err := c.Set(t.Context(), redislock.LockName(l, key), rawTombstone(ahead), time.Hour+time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
}
