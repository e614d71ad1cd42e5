package redisstore_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// slowPoll is the poll back-off of the tests that show a duplicate woken
// by the notification: every poll sleeps at least half of it (2.5 s), so
// a duplicate that waited less was not answered by a poll.
var slowPoll = idemkit.Backoff{Base: 5 * time.Second, Max: 5 * time.Second}

// shortestPoll is the shortest sleep of slowPoll.
const shortestPoll = 2500 * time.Millisecond

// kinds are the deployments the watch tests run on: the shared single
// node through RESP3 (go-redis's default) and RESP2, and the shared
// cluster.
var kinds = []string{"single", "single-resp2", "cluster"}

// namedClient returns a client of the shared deployment kind whose
// connections carry name (CLIENT SETNAME), dialing through dial when it is
// not nil, closed when the test ends.
func namedClient(t testing.TB, kind, name string, dial func(context.Context, string, string) (net.Conn, error)) redis.UniversalClient {
	if kind == "cluster" {
		c := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: testenv.RedisCluster(t).Addrs, ContextTimeoutEnabled: true, ClientName: name, Dialer: dial,
		})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	return nodeClient(t, testenv.Redis(t).Addr, func(o *redis.Options) {
		o.ClientName, o.Dialer = name, dial
		if kind == "single-resp2" {
			o.Protocol = 2
		}
	})
}

// adminClient returns a client of the shared deployment kind.
func adminClient(t testing.TB, kind string) redis.UniversalClient {
	return namedClient(t, kind, "", nil)
}

// eachMaster calls fn with a client of every master c reaches (c itself
// on a single node).
func eachMaster(ctx context.Context, c redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, fn)
	}
	return fn(ctx, c.(*redis.Client))
}

// listenerConns returns the ids of the pub/sub connections named name
// (CLIENT LIST TYPE pubsub), by node address.
func listenerConns(t testing.TB, admin redis.UniversalClient, name string) map[string][]string {
	t.Helper()
	var mu sync.Mutex
	out := map[string][]string{}
	err := eachMaster(t.Context(), admin, func(ctx context.Context, n *redis.Client) error {
		list, err := n.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
		if err != nil {
			return err
		}
		for line := range strings.Lines(list) {
			f := map[string]string{}
			for _, kv := range strings.Fields(line) {
				k, v, _ := strings.Cut(kv, "=")
				f[k] = v
			}
			if f["name"] == name {
				mu.Lock()
				out[n.Options().Addr] = append(out[n.Options().Addr], f["id"])
				mu.Unlock()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// countConns returns how many connections conns holds.
func countConns(conns map[string][]string) int {
	n := 0
	for _, ids := range conns {
		n += len(ids)
	}
	return n
}

// killListeners kills the pub/sub connections named name (CLIENT KILL ID)
// on the server that carries the channel of record key k in s, and returns
// their ids.
func killListeners(t testing.TB, admin redis.UniversalClient, name string, s *redisstore.Store, k string) []string {
	t.Helper()
	node, ok := admin.(*redis.Client)
	if cc, isCluster := admin.(*redis.ClusterClient); isCluster {
		var err error
		if node, err = cc.MasterForKey(t.Context(), redisstore.RedisKey(s, k)); err != nil {
			t.Fatal(err)
		}
		ok = true
	}
	if !ok {
		t.Fatalf("no node for %T", admin)
	}
	ids := listenerConns(t, node, name)[node.Options().Addr]
	for _, id := range ids {
		if err := node.Do(t.Context(), "CLIENT", "KILL", "ID", id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// subscribers returns how many connections are subscribed to the channel
// of record key k in s (PUBSUB NUMSUB, SHARDNUMSUB on the key's master).
func subscribers(t testing.TB, admin redis.UniversalClient, s *redisstore.Store, k string) int64 {
	t.Helper()
	ch := redisstore.RedisKey(s, k)
	if cc, ok := admin.(*redis.ClusterClient); ok {
		n, err := cc.MasterForKey(t.Context(), ch)
		if err != nil {
			t.Fatal(err)
		}
		m, err := n.PubSubShardNumSub(t.Context(), ch).Result()
		if err != nil {
			t.Fatal(err)
		}
		return m[ch]
	}
	m, err := admin.PubSubNumSub(t.Context(), ch).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m[ch]
}

// guardKey returns the record key of a guard's key k, without a scope.
func guardKey(k string) string { return "idempotency::" + k }

// eventually fails the test unless cond holds within 30 s, checking it
// every 10 ms.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fired reports whether ch is closed.
func fired(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// awaitFire fails the test unless ch closes within 30 s.
func awaitFire(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: the watch did not fire", what)
	}
}

// claim claims k in s for a minute.
func claim(t testing.TB, s *redisstore.Store, k string) store.Record {
	t.Helper()
	rec, ok, err := s.Claim(t.Context(), k, "fp", time.Minute)
	if err != nil || !ok {
		t.Fatalf("claim %q: %v, %v", k, ok, err)
	}
	return rec
}

// complete completes the claim rec in s.
func complete(t testing.TB, s *redisstore.Store, rec store.Record) {
	t.Helper()
	rec.State, rec.Response = store.StateCompleted, []byte("done")
	if ok, err := s.Complete(t.Context(), rec, time.Minute); !ok || err != nil {
		t.Fatalf("complete %q: %v, %v", rec.Key, ok, err)
	}
}

// TestWatch: a watch fires when its key's claim is completed, released or
// deleted by another client, and only then: not when created, not on an
// extension, not for another key; keys with hash tags, braces and bytes
// that are hashed included.
func TestWatchFiresWhenTheClaimEnds(t *testing.T) {
	ends := map[string]func(t *testing.T, s *redisstore.Store, rec store.Record){
		"complete": func(t *testing.T, s *redisstore.Store, rec store.Record) { complete(t, s, rec) },
		"release": func(t *testing.T, s *redisstore.Store, rec store.Record) {
			if ok, err := s.Release(t.Context(), rec.Key, rec.Fence); !ok || err != nil {
				t.Fatalf("release: %v, %v", ok, err)
			}
		},
		"delete": func(t *testing.T, s *redisstore.Store, rec store.Record) {
			if ok, err := s.Delete(t.Context(), rec.Key); !ok || err != nil {
				t.Fatalf("delete: %v, %v", ok, err)
			}
		},
	}
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, adminClient(t, kind))
			writer := newStore(t, adminClient(t, kind))
			for name, end := range ends {
				for _, k := range []string{"order-" + name, "{tag}:" + name, "a}b{" + name, "\x00" + name} {
					rec := claim(t, writer, k)
					ch, stop := s.Watch(t.Context(), k)
					other, stopOther := s.Watch(t.Context(), k+"-other")
					claim(t, writer, k+"-other")
					if _, ok, err := writer.Extend(t.Context(), k, rec.Fence, time.Minute); !ok || err != nil {
						t.Fatalf("extend: %v, %v", ok, err)
					}
					if fired(ch) {
						t.Fatalf("%s %q: the watch fired before the claim ended", name, k)
					}
					end(t, writer, rec)
					awaitFire(t, ch, name+" "+k)
					// The key's message has been handled: another key's
					// watch was not woken by it, nor by the claim or the
					// extension before.
					if fired(other) {
						t.Fatalf("%s %q: the watch of another key fired", name, k)
					}
					stop()
					stop() // more than once is fine
					stopOther()
				}
			}
		})
	}
}

// TestWatchMissesNothing: a claim ended right after Watch returns always
// fires the watch, as the subscription is confirmed before Watch returns;
// 200 keys, each watched by 4 goroutines at once (one subscribes, the
// others wait for its confirmation), and ended by another client.
func TestWatchMissesNothing(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, adminClient(t, kind))
			writer := newStore(t, adminClient(t, kind))
			for i := range 200 {
				k := fmt.Sprint("order-", i)
				rec := claim(t, writer, k)
				chans := make([]<-chan struct{}, 4)
				stops := make([]func(), 4)
				var wg sync.WaitGroup
				for j := range chans {
					wg.Go(func() { chans[j], stops[j] = s.Watch(t.Context(), k) })
				}
				wg.Wait()
				complete(t, writer, rec)
				for j, ch := range chans {
					awaitFire(t, ch, k)
					stops[j]()
				}
			}
		})
	}
}

// TestWatchSubscribesOncePerKey: watches of one key share one subscription
// on the server, which ends when the last watch stops (not before); a new
// watch of the key subscribes again and fires.
func TestWatchSubscribesOncePerKey(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			admin := adminClient(t, kind)
			s := newStore(t, adminClient(t, kind))
			writer := newStore(t, admin)
			const k = "order-1"
			rec := claim(t, writer, k)
			var stops []func()
			for range 3 {
				_, stop := s.Watch(t.Context(), k)
				stops = append(stops, stop)
			}
			if n := subscribers(t, admin, s, k); n != 1 {
				t.Fatalf("3 watches of a key: %d subscribers; want 1", n)
			}
			stops[0]()
			stops[1]()
			if n := subscribers(t, admin, s, k); n != 1 {
				t.Fatalf("1 watch left: %d subscribers; want 1", n)
			}
			stops[2]()
			eventually(t, "the last watch stopped: unsubscribed", func() bool { return subscribers(t, admin, s, k) == 0 })
			ch, stop := s.Watch(t.Context(), k)
			defer stop()
			if n := subscribers(t, admin, s, k); n != 1 {
				t.Fatalf("watched again: %d subscribers; want 1", n)
			}
			complete(t, writer, rec)
			awaitFire(t, ch, "watched again")
		})
	}
}

// TestListenerConnections: however many requests wait, a store listens on
// one connection per server: 1000 goroutines watching 100 keys hold one
// subscription per key, on one connection on a single node and one per
// master on the cluster; 1000 duplicates of one request, waiting through
// two guards, hold one connection each guard. Every watch fires, every
// duplicate replays, and the subscriptions end with the watches.
func TestListenerConnections(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind+"/watches", func(t *testing.T) {
			t.Parallel()
			admin := adminClient(t, kind)
			name := testenv.Name(t)
			s := newStore(t, namedClient(t, kind, name, nil))
			writer := newStore(t, admin)
			recs := make([]store.Record, 100)
			for i := range recs {
				recs[i] = claim(t, writer, fmt.Sprint("order-", i))
			}
			chans := make([]<-chan struct{}, 1000)
			stops := make([]func(), 1000)
			var wg sync.WaitGroup
			for i := range chans {
				wg.Go(func() { chans[i], stops[i] = s.Watch(t.Context(), recs[i%100].Key) })
			}
			wg.Wait()
			conns := listenerConns(t, admin, name)
			masters := map[string]bool{}
			for _, rec := range recs {
				if n := subscribers(t, admin, s, rec.Key); n != 1 {
					t.Fatalf("10 watches of %q: %d subscribers; want 1", rec.Key, n)
				}
				if cc, ok := admin.(*redis.ClusterClient); ok {
					m, err := cc.MasterForKey(t.Context(), redisstore.RedisKey(s, rec.Key))
					if err != nil {
						t.Fatal(err)
					}
					masters[m.Options().Addr] = true
				}
			}
			want := max(1, len(masters))
			if countConns(conns) != want || len(conns) != want {
				t.Fatalf("1000 watches of 100 keys: listener connections %v; want one on each of %d servers", conns, want)
			}
			t.Logf("1000 watches of 100 keys: %d listener connections", countConns(conns))
			for _, rec := range recs {
				complete(t, writer, rec)
			}
			for i, ch := range chans {
				awaitFire(t, ch, fmt.Sprint("watch ", i))
				stops[i]()
			}
			for _, rec := range recs {
				eventually(t, "unsubscribed after the last watch", func() bool { return subscribers(t, admin, s, rec.Key) == 0 })
			}
		})
		t.Run(kind+"/requests", func(t *testing.T) {
			t.Parallel()
			admin := adminClient(t, kind)
			name := testenv.Name(t)
			var waiting atomic.Int32
			hook := middleware.WithHook(middleware.HookFunc(func(_ context.Context, e middleware.Event) {
				if e.Kind == middleware.EventWaiting {
					waiting.Add(1)
				}
			}))
			var guards []*middleware.Guard
			var stores []*redisstore.Store
			for range 2 {
				s := newStore(t, namedClient(t, kind, name, nil))
				g, err := middleware.New(s, middleware.WithBackoff(slowPoll), middleware.WithWaitBudget(time.Minute), hook)
				if err != nil {
					t.Fatal(err)
				}
				guards, stores = append(guards, g), append(stores, s)
			}
			const k = "order-1"
			var runs atomic.Int32
			release := make(chan struct{})
			first := make(chan error, 1)
			go func() {
				_, err := guards[0].Execute(t.Context(), k, fp, func(context.Context) (middleware.Result, error) {
					runs.Add(1)
					<-release
					return middleware.Result{Value: []byte("receipt")}, nil
				})
				first <- err
			}()
			eventually(t, "the first request claims", func() bool { return runs.Load() == 1 })
			const n = 1000
			errs := make(chan error, n)
			for i := range n {
				go func() {
					out, err := guards[i%2].Execute(t.Context(), k, fp, answer(&runs, "again"))
					if err == nil && (!out.Replayed || string(out.Value) != "receipt") {
						err = fmt.Errorf("duplicate %d: %+v; want a replay", i, out)
					}
					errs <- err
				}()
			}
			eventually(t, "1000 duplicates waiting", func() bool { return waiting.Load() == n })
			eventually(t, "both guards watching", func() bool { return subscribers(t, admin, stores[0], guardKey(k)) == 2 })
			conns := listenerConns(t, admin, name)
			if countConns(conns) != 2 {
				t.Fatalf("1000 duplicates waiting through 2 guards: listener connections %v; want 2", conns)
			}
			t.Logf("1000 duplicates waiting through 2 guards: %d listener connections, 2 subscribers", countConns(conns))
			close(release)
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			for range n {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			if r := runs.Load(); r != 1 {
				t.Fatalf("fn ran %d times; want 1", r)
			}
			eventually(t, "unsubscribed after the waits", func() bool { return subscribers(t, admin, stores[0], guardKey(k)) == 0 })
		})
	}
}

// duplicates runs a request on holder whose fn takes work, then n
// duplicates spread over dups once every one is waiting, and checks that
// fn ran once and every duplicate replayed its response. It returns, for
// each duplicate, how long it waited and when it got its answer, and when
// fn returned.
func duplicates(t *testing.T, holder *middleware.Guard, dups []*middleware.Guard, waiting *atomic.Int32, k string, n int, work time.Duration) (waited []time.Duration, answered []time.Time, fnEnd time.Time) {
	t.Helper()
	var runs atomic.Int32
	release := make(chan struct{})
	first := make(chan error, 1)
	var end time.Time
	go func() {
		_, err := holder.Execute(t.Context(), k, fp, func(context.Context) (middleware.Result, error) {
			runs.Add(1)
			<-release
			time.Sleep(work)
			end = time.Now()
			return middleware.Result{Value: []byte("receipt")}, nil
		})
		first <- err
	}()
	eventually(t, "the first request claims", func() bool { return runs.Load() == 1 })
	before := waiting.Load()
	type result struct {
		waited time.Duration
		at     time.Time
		err    error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			var w time.Duration
			ctx, outcome := middleware.WatchOutcome(t.Context())
			out, err := dups[i%len(dups)].Execute(ctx, k, fp, answer(&runs, "again"))
			at := time.Now()
			if e, ok := outcome(); ok {
				w = e.Waited
			}
			if err == nil && (!out.Replayed || string(out.Value) != "receipt") {
				err = fmt.Errorf("duplicate %d: %+v; want a replay", i, out)
			}
			results <- result{w, at, err}
		}()
	}
	eventually(t, "every duplicate waiting", func() bool { return waiting.Load()-before == int32(n) })
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range n {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		waited, answered = append(waited, r.waited), append(answered, r.at)
	}
	if r := runs.Load(); r != 1 {
		t.Fatalf("fn ran %d times; want 1", r)
	}
	return waited, answered, end
}

// waitingHook counts the calls that started waiting.
func waitingHook(n *atomic.Int32) middleware.Option {
	return middleware.WithHook(middleware.HookFunc(func(_ context.Context, e middleware.Event) {
		if e.Kind == middleware.EventWaiting {
			n.Add(1)
		}
	}))
}

// TestDuplicatesWokenByNotification: 32 duplicates of a running request,
// through two guards with clients of their own that poll every 5 s (2.5 s
// at the least), get their replays without a poll: each waited less than
// the shortest poll, so the notification woke it.
func TestDuplicatesWokenByNotification(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var waiting atomic.Int32
			var guards []*middleware.Guard
			for range 2 {
				guards = append(guards, newGuard(t, adminClient(t, kind),
					middleware.WithBackoff(slowPoll), middleware.WithWaitBudget(10*time.Second), waitingHook(&waiting)))
			}
			waited, answered, end := duplicates(t, guards[0], guards, &waiting, "order-1", 32, 0)
			var delays []time.Duration
			for i, w := range waited {
				if w >= shortestPoll {
					t.Fatalf("duplicate %d waited %v: answered by a poll, not the notification", i, w)
				}
				delays = append(delays, answered[i].Sub(end))
			}
			slices.Sort(delays)
			t.Logf("from fn's end to the duplicates' answers: median %v, max %v", delays[len(delays)/2], delays[len(delays)-1])
		})
	}
}

// TestExactlyOnceWithNotifications: 64 goroutines through two guards with
// clients of their own, on one key, 20 times: fn runs once, every
// duplicate replays, and no duplicate needed a poll (they poll every 5 s).
func TestExactlyOnceWithNotifications(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var longest atomic.Int64
			hook := middleware.WithHook(middleware.HookFunc(func(_ context.Context, e middleware.Event) {
				if e.Kind == middleware.EventReplayed && int64(e.Waited) > longest.Load() {
					longest.Store(int64(e.Waited))
				}
			}))
			var guards []*middleware.Guard
			for range 2 {
				guards = append(guards, newGuard(t, adminClient(t, kind),
					middleware.WithBackoff(slowPoll), middleware.WithWaitBudget(10*time.Second), hook))
			}
			guardtest.ExactlyOnce(t, guards, guardtest.Race{Callers: 64, Rounds: 20, KeyPrefix: "race-", Fingerprint: fp, MaxWork: 20 * time.Millisecond})
			if w := time.Duration(longest.Load()); w >= shortestPoll {
				t.Fatalf("a duplicate waited %v: answered by a poll, not the notification", w)
			}
		})
	}
}

// TestWatchWakesOnConnectionLoss: killing the listener's connection wakes
// every watch once, though the claim is still there (a message may have
// been lost); the listener reconnects on its own, and a new watch fires on
// the next completion. Through a guard that polls every 5 s, a duplicate
// whose listener was killed while it waited still gets its replay without
// a poll.
func TestWatchWakesOnConnectionLoss(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			admin := adminClient(t, kind)
			name := testenv.Name(t)
			c := namedClient(t, kind, name, nil)
			s := newStore(t, c)
			writer := newStore(t, admin)

			rec := claim(t, writer, "order-1")
			ch, stop := s.Watch(t.Context(), "order-1")
			killed := killListeners(t, admin, name, s, "order-1")
			if len(killed) != 1 {
				t.Fatalf("killed %d listener connections; want 1", len(killed))
			}
			awaitFire(t, ch, "the listener's connection killed")
			stop()
			if got, ok, err := writer.Get(t.Context(), "order-1"); err != nil || !ok || got.State != store.StateClaimed {
				t.Fatalf("after the wake-up: %+v, %v, %v; want the claim still there", got, ok, err)
			}
			ch, stop = s.Watch(t.Context(), "order-1")
			complete(t, writer, rec)
			awaitFire(t, ch, "after the reconnection")
			if conns := listenerConns(t, admin, name); countConns(conns) != 1 || slices.ContainsFunc(slices.Collect(maps.Values(conns)), func(ids []string) bool { return slices.Contains(ids, killed[0]) }) {
				t.Fatalf("after the reconnection: listener connections %v; want one new one (killed %s)", conns, killed[0])
			}
			stop()

			var waiting atomic.Int32
			g, err := middleware.New(s, middleware.WithBackoff(slowPoll), middleware.WithWaitBudget(10*time.Second), waitingHook(&waiting))
			if err != nil {
				t.Fatal(err)
			}
			holder := newGuard(t, admin)
			var runs atomic.Int32
			release := make(chan struct{})
			go func() {
				_, _ = holder.Execute(t.Context(), "order-2", fp, func(context.Context) (middleware.Result, error) {
					runs.Add(1)
					<-release
					return middleware.Result{Value: []byte("receipt")}, nil
				})
			}()
			eventually(t, "the first request claims", func() bool { return runs.Load() == 1 })
			type result struct {
				out  middleware.Outcome
				wait time.Duration
				err  error
			}
			done := make(chan result, 1)
			go func() {
				ctx, outcome := middleware.WatchOutcome(t.Context())
				out, err := g.Execute(ctx, "order-2", fp, answer(&runs, "again"))
				e, _ := outcome()
				done <- result{out, e.Waited, err}
			}()
			eventually(t, "the duplicate watching", func() bool { return waiting.Load() == 1 && subscribers(t, admin, s, guardKey("order-2")) == 1 })
			if n := len(killListeners(t, admin, name, s, guardKey("order-2"))); n != 1 {
				t.Fatalf("killed %d listener connections; want 1", n)
			}
			close(release)
			r := <-done
			if r.err != nil || !r.out.Replayed || string(r.out.Value) != "receipt" {
				t.Fatalf("the duplicate: %+v, %v; want a replay", r.out, r.err)
			}
			if r.wait >= shortestPoll {
				t.Fatalf("the duplicate waited %v: answered by a poll", r.wait)
			}
			if runs.Load() != 1 {
				t.Fatalf("fn ran %d times; want 1", runs.Load())
			}
		})
	}
}

// notifiedAgain checks that, after a failure of watcher's listener, a
// watch through watcher fires on a completion through writer again: it
// watches a fresh key until the watch is neither refused (setups pause a
// moment after a failed one) nor woken by the failure, then completes the
// key. Given a key, it probes that key instead (deleting it after each
// probe, so that it is free again): on a cluster, each master's listener
// reconnects on its own, and only a probe of the key a test goes on with
// tells that its master's listener is back.
func notifiedAgain(t *testing.T, watcher, writer *redisstore.Store, key ...string) {
	t.Helper()
	for i := 0; ; i++ {
		k := fmt.Sprint("probe-", i)
		if len(key) > 0 {
			k = key[0]
		}
		rec := claim(t, writer, k)
		ch, stop := watcher.Watch(t.Context(), k)
		if !fired(ch) && !redisstore.Refused(ch) {
			complete(t, writer, rec)
			awaitFire(t, ch, "after the listener's failure")
			stop()
			forget(t, writer, key...)
			return
		}
		stop()
		forget(t, writer, key...)
		if i == 300 {
			t.Fatal("the listener did not come back")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// forget deletes the given key, if any, through s.
func forget(t *testing.T, s *redisstore.Store, key ...string) {
	t.Helper()
	for _, k := range key {
		if _, err := s.Delete(t.Context(), k); err != nil {
			t.Fatalf("delete %q: %v", k, err)
		}
	}
}

// splitStore is a guard's store that claims and completes through one
// store and watches through another (on a client of its own, whose
// connections a test can cut).
type splitStore struct {
	*redisstore.Store
	watcher *redisstore.Store
}

func (s splitStore) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	return s.watcher.Watch(ctx, key)
}

// TestLostNotificationFallsBackToPolling: a duplicate waits; its
// listener's connection is cut and cannot come back, so the completion's
// notification reaches nobody. The duplicate polls (every 20 to 100 ms)
// and still gets its replay; once the connection may come back, the
// listener reconnects and notifies again: a duplicate that polls every
// 5 s is answered without a poll.
func TestLostNotificationFallsBackToPolling(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			admin := adminClient(t, kind)
			ls := newLinks(t)
			watcher := newStore(t, namedClient(t, kind, testenv.Name(t), ls.dial))
			split := splitStore{newStore(t, adminClient(t, kind)), watcher}
			var waiting atomic.Int32
			polling, err := middleware.New(split, middleware.WithBackoff(idemkit.Backoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}),
				middleware.WithWaitBudget(10*time.Second), waitingHook(&waiting))
			if err != nil {
				t.Fatal(err)
			}
			holder := newGuard(t, admin)
			var runs atomic.Int32
			release := make(chan struct{})
			go func() {
				_, _ = holder.Execute(t.Context(), "order-1", fp, func(context.Context) (middleware.Result, error) {
					runs.Add(1)
					<-release
					return middleware.Result{Value: []byte("receipt")}, nil
				})
			}()
			eventually(t, "the first request claims", func() bool { return runs.Load() == 1 })
			type result struct {
				out middleware.Outcome
				err error
			}
			done := make(chan result, 1)
			go func() {
				out, err := polling.Execute(t.Context(), "order-1", fp, answer(&runs, "again"))
				done <- result{out, err}
			}()
			eventually(t, "the duplicate watching", func() bool { return waiting.Load() == 1 && subscribers(t, admin, watcher, guardKey("order-1")) == 1 })
			restore := ls.cut()
			eventually(t, "the subscription gone with the connection", func() bool { return subscribers(t, admin, watcher, guardKey("order-1")) == 0 })
			close(release) // its notification reaches nobody
			r := <-done
			if r.err != nil || !r.out.Replayed || string(r.out.Value) != "receipt" {
				t.Fatalf("the duplicate after a lost notification: %+v, %v; want a replay by polling", r.out, r.err)
			}
			restore()

			// The listener reconnects: a watch fires on a completion again.
			notifiedAgain(t, watcher, newStore(t, admin), guardKey("order-2"))
			slow, err := middleware.New(split, middleware.WithBackoff(slowPoll), middleware.WithWaitBudget(10*time.Second), waitingHook(&waiting))
			if err != nil {
				t.Fatal(err)
			}
			waited, _, _ := duplicates(t, holder, []*middleware.Guard{slow}, &waiting, "order-2", 4, 0)
			for i, w := range waited {
				if w >= shortestPoll {
					t.Fatalf("after the reconnection, duplicate %d waited %v: answered by a poll", i, w)
				}
			}
		})
	}
}

// TestWatchManyKeysAfterReconnection: 50 watched keys (on every master of
// the cluster) lose their listeners' connections: every watch wakes, the
// keys are watched again, and every new watch fires on its completion
// (on the cluster go-redis cannot resubscribe a shard's channels in one
// command; the listener subscribes them again one by one).
func TestWatchManyKeysAfterReconnection(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			admin := adminClient(t, kind)
			name := testenv.Name(t)
			s := newStore(t, namedClient(t, kind, name, nil))
			writer := newStore(t, admin)
			recs := make([]store.Record, 50)
			chans := make([]<-chan struct{}, len(recs))
			stops := make([]func(), len(recs))
			for i := range recs {
				recs[i] = claim(t, writer, fmt.Sprint("order-", i))
				chans[i], stops[i] = s.Watch(t.Context(), recs[i].Key)
			}
			conns := listenerConns(t, admin, name)
			err := eachMaster(t.Context(), admin, func(ctx context.Context, n *redis.Client) error {
				for _, id := range conns[n.Options().Addr] {
					if err := n.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, ch := range chans {
				awaitFire(t, ch, fmt.Sprint("order-", i, " after the kill"))
				stops[i]()
			}
			var wg sync.WaitGroup
			for i, rec := range recs {
				wg.Go(func() {
					eventually(t, "watched again", func() bool {
						chans[i], stops[i] = s.Watch(t.Context(), rec.Key)
						if fired(chans[i]) || redisstore.Refused(chans[i]) {
							stops[i]() // woken as it was set up, or refused a moment after a failure
							return false
						}
						return true
					})
				})
			}
			wg.Wait()
			for i, rec := range recs {
				complete(t, writer, rec)
				awaitFire(t, chans[i], rec.Key)
				stops[i]()
			}
		})
	}
}

// TestWatchDetectsSilentConnection: when the listener's connection stops
// answering (every byte stalls, nothing is closed), the health check's
// unanswered ping wakes the watches; once the connection answers again,
// watches fire on completions.
func TestWatchDetectsSilentConnection(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ls := newLinks(t)
			c := namedClient(t, kind, testenv.Name(t), ls.dial)
			s := newStore(t, c, redisstore.WithListenerTimings(time.Minute, 100*time.Millisecond))
			writer := newStore(t, adminClient(t, kind))
			claim(t, writer, "order-1")
			ch, stop := s.Watch(t.Context(), "order-1")
			defer stop()
			resume := ls.stall()
			awaitFire(t, ch, "the connection stalled")
			resume()
			if got, ok, err := writer.Get(t.Context(), "order-1"); err != nil || !ok || got.State != store.StateClaimed {
				t.Fatalf("after the wake-up: %+v, %v, %v; want the claim still there", got, ok, err)
			}
			notifiedAgain(t, s, writer)
		})
	}
}

// TestListenerClosesWhenIdle: a listener without watches closes its
// connection after its idle time, and the next watch starts a new one.
func TestListenerClosesWhenIdle(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, adminClient(t, kind), redisstore.WithListenerTimings(100*time.Millisecond, 50*time.Millisecond))
			writer := newStore(t, adminClient(t, kind))
			rec := claim(t, writer, "order-1")
			_, stop := s.Watch(t.Context(), "order-1")
			if n := redisstore.Listeners(s); n != 1 {
				t.Fatalf("%d listeners while watching; want 1", n)
			}
			stop()
			eventually(t, "the idle listener closed", func() bool { return redisstore.Listeners(s) == 0 })
			ch, stop := s.Watch(t.Context(), "order-1")
			defer stop()
			complete(t, writer, rec)
			awaitFire(t, ch, "with a new listener")
		})
	}
}

// TestWatchAfterClientClosed: closing the client wakes the watches; a
// watch on a closed client returns without waiting for its ctx.
func TestWatchAfterClientClosed(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			c := adminClient(t, kind)
			s := newStore(t, c)
			claim(t, newStore(t, adminClient(t, kind)), "order-1")
			ch, _ := s.Watch(t.Context(), "order-1")
			_ = c.Close()
			awaitFire(t, ch, "the client closed")
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			_, stop := s.Watch(ctx, "order-1")
			stop()
			if ctx.Err() != nil {
				t.Fatal("a watch on a closed client waited for its ctx")
			}
		})
	}
}

// TestWatchUnderACL: a Redis user allowed the store's keys but no pub/sub
// channel (a new user's default on Redis 7) still completes, releases and
// deletes (the refused publication does not fail them), its watches are
// refused at once and its duplicates replay by polling; a user allowed
// what the package documentation lists, and nothing else, is notified.
func TestWatchUnderACL(t *testing.T) {
	srv := testenv.NewRedis(t)
	admin := nodeClient(t, srv.Addr)
	if err := redisstore.LoadScript(t.Context(), admin); err != nil {
		t.Fatal(err)
	}
	p := prefix(t)
	for user, rules := range map[string][]any{
		"nochannels": {"+@all", "resetchannels"},
		"documented": {"-@all", "+eval", "+evalsha", "+multi", "+exec", "+get", "+set", "+pexpiretime", "+pttl", "+time", "+del", "+pexpireat",
			"+publish", "+subscribe", "+unsubscribe", "+ping", "resetchannels", "&" + p + "*"},
	} {
		args := append([]any{"ACL", "SETUSER", user, "reset", "on", ">pw", "~" + p + "*"}, rules...)
		if err := admin.Do(t.Context(), args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	as := func(user string) *redisstore.Store {
		s, err := redisstore.New(nodeClient(t, srv.Addr, func(o *redis.Options) { o.Username, o.Password = user, "pw" }),
			redisstore.WithKeyPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	s := as("nochannels")
	rec := claim(t, s, "order-1")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ch, stop := s.Watch(ctx, "order-1")
	defer stop()
	if ctx.Err() != nil || !redisstore.Refused(ch) {
		t.Fatal("a subscription the server refused: the watch was not refused at once")
	}
	complete(t, s, rec)
	rec = claim(t, s, "order-2")
	if ok, err := s.Release(t.Context(), rec.Key, rec.Fence); !ok || err != nil {
		t.Fatalf("release without the channels: %v, %v", ok, err)
	}
	claim(t, s, "order-3")
	if ok, err := s.Delete(t.Context(), "order-3"); !ok || err != nil {
		t.Fatalf("delete without the channels: %v, %v", ok, err)
	}
	var waiting atomic.Int32
	g, err := middleware.New(s, middleware.WithBackoff(idemkit.Backoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}),
		middleware.WithWaitBudget(10*time.Second), waitingHook(&waiting))
	if err != nil {
		t.Fatal(err)
	}
	duplicates(t, g, []*middleware.Guard{g}, &waiting, "order-4", 8, 0)

	s = as("documented")
	for _, end := range []string{"complete", "release", "delete"} {
		rec = claim(t, s, "order-5-"+end)
		ch, stop = s.Watch(t.Context(), rec.Key)
		if redisstore.Refused(ch) {
			t.Fatal("a user allowed the channels: the watch was refused")
		}
		var ok bool
		switch end {
		case "complete":
			rec.State, rec.Response = store.StateCompleted, []byte("done")
			ok, err = s.Complete(t.Context(), rec, time.Minute)
		case "release":
			ok, err = s.Release(t.Context(), rec.Key, rec.Fence)
		case "delete":
			ok, err = s.Delete(t.Context(), rec.Key)
		}
		if !ok || err != nil {
			t.Fatalf("%s as the documented user: %v, %v", end, ok, err)
		}
		awaitFire(t, ch, end+" as the documented user")
		stop()
	}
	if _, _, err := s.Get(t.Context(), "order-5-complete"); err != nil {
		t.Fatalf("get as the documented user: %v", err)
	}
}

// TestWatchValidates: a key the store refuses, a ctx already ended and a
// client that cannot notify (a ring) give a watch that never fires, at
// once.
func TestWatchValidates(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": testenv.Redis(t).Addr}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = ring.Close() })
	rs, err := redisstore.New(ring, redisstore.WithKeyPrefix(prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	s := newStore(t, adminClient(t, "single"))
	for name, watch := range map[string]func() (<-chan struct{}, func()){
		"empty key":  func() (<-chan struct{}, func()) { return s.Watch(t.Context(), "") },
		"ended ctx":  func() (<-chan struct{}, func()) { return s.Watch(ended, "order-1") },
		"ring":       func() (<-chan struct{}, func()) { return rs.Watch(t.Context(), "order-1") },
		"ring again": func() (<-chan struct{}, func()) { return rs.Watch(t.Context(), "order-1") },
	} {
		ch, stop := watch()
		if !redisstore.Refused(ch) {
			t.Errorf("%s: the watch was not refused", name)
		}
		stop()
	}
	if n := redisstore.Listeners(rs) + redisstore.Listeners(s); n != 0 {
		t.Fatalf("%d listeners started; want none", n)
	}
	// A ring's completion works; nothing is published.
	rec := claim(t, rs, "order-1")
	complete(t, rs, rec)
}

// TestReleaseHandsTheKeyToTheOldestWaiter: a release through the store
// wakes the oldest of its watches of the key (not every one), and a claim
// of the key through the store that comes meanwhile (the releaser's own,
// claiming again at once) waits its turn instead of racing the woken
// waiter to the server: the woken waiter claims the key, the other claim
// is refused. A completion wakes every watch.
func TestReleaseHandsTheKeyToTheOldestWaiter(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := newStore(t, adminClient(t, kind))
			const k = "order-1"
			held := claim(t, s, k)
			first, stopFirst := s.Watch(ctx, k)
			second, stopSecond := s.Watch(ctx, k)
			defer stopSecond()
			if ok, err := s.Release(ctx, k, held.Fence); !ok || err != nil {
				t.Fatalf("release: %v, %v", ok, err)
			}
			awaitFire(t, first, "the oldest watch")
			if fired(second) {
				t.Fatal("a release woke the second watch too")
			}
			again := make(chan bool, 1)
			go func() {
				_, claimed, err := s.Claim(ctx, k, "releaser", time.Minute)
				if err != nil {
					t.Error(err)
				}
				again <- claimed
			}()
			eventually(t, "the releaser's claim waits in line", func() bool { return redisstore.Waiting(s, k) == 2 })
			stopFirst()
			rec, claimed, err := s.Claim(ctx, k, "woken", time.Minute)
			if err != nil || !claimed {
				t.Fatalf("the woken waiter's claim: %+v, %v, %v; want the key", rec, claimed, err)
			}
			if <-again {
				t.Fatal("the releaser's claim took the key ahead of the woken waiter")
			}
			complete(t, s, rec)
			awaitFire(t, second, "the second watch, on the completion")
		})
	}
}

// TestClaimInLineKeepsItsPlace: a claim of the store that waits in line for
// a key its store holds counts as a watch of the key: when the last other
// watch stops, the key's subscription stays and the waiting claim is not
// woken (before, it was, with every other waiter, to be refused); the
// release through the store then hands the key to it.
func TestClaimInLineKeepsItsPlace(t *testing.T) {
	ctx := t.Context()
	admin := adminClient(t, "single")
	s := newStore(t, adminClient(t, "single"))
	const k = "order-1"
	_, stop := s.Watch(ctx, k)
	held := claim(t, s, k) // through the store while it watches the key: it knows the key is held
	type result struct {
		claimed bool
		err     error
	}
	inLine := make(chan result, 1)
	go func() {
		_, claimed, err := s.Claim(ctx, k, "in line", time.Minute)
		inLine <- result{claimed, err}
	}()
	eventually(t, "the claim waits in line", func() bool { return redisstore.Waiting(s, k) == 2 })
	stop()
	if n := subscribers(t, admin, s, k); n != 1 {
		t.Fatalf("the last watch stopped while a claim waits in line: %d subscribers; want 1", n)
	}
	if ok, err := s.Release(ctx, k, held.Fence); !ok || err != nil {
		t.Fatalf("release: %v, %v", ok, err)
	}
	if r := <-inLine; r.err != nil || !r.claimed {
		t.Fatalf("the claim in line: %v, %v; want the key, handed over by the release", r.claimed, r.err)
	}
}
