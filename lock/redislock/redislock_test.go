package redislock_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/lock/provider"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/redis/go-redis/v9"
)

func TestNewValidates(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer c.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true})
	defer ring.Close()
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opts   []redislock.Option
	}{
		{"nil client", nil, nil},
		{"empty prefix", c, []redislock.Option{redislock.WithKeyPrefix("")}},
		{"prefix with braces", c, []redislock.Option{redislock.WithKeyPrefix("a{b}")}},
		{"prefix with a space", c, []redislock.Option{redislock.WithKeyPrefix("a b")}},
		{"prefix not ASCII", c, []redislock.Option{redislock.WithKeyPrefix("caf\u00e9")}},
		{"prefix too long", c, []redislock.Option{redislock.WithKeyPrefix(strings.Repeat("p", 65))}},
		{"no replicas", c, []redislock.Option{redislock.WithWaitForReplicas(0, time.Second)}},
		{"negative replicas", c, []redislock.Option{redislock.WithWaitForAOF(true, -1, time.Second)}},
		{"no aof at all", c, []redislock.Option{redislock.WithWaitForAOF(false, 0, time.Second)}},
		{"zero wait timeout", c, []redislock.Option{redislock.WithWaitForReplicas(1, 0)}},
		{"wait on a ring", ring, []redislock.Option{redislock.WithWaitForReplicas(1, time.Second)}},
	} {
		if _, err := redislock.New(tc.client, tc.opts...); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Errorf("%s: New = %v; want InvalidArgument", tc.name, err)
		}
	}
	for _, prefix := range []string{"a", "app:v2", "a::b", strings.Repeat("p", 64)} {
		if _, err := redislock.New(c, redislock.WithKeyPrefix(prefix)); err != nil {
			t.Errorf("New with prefix %q: %v", prefix, err)
		}
	}
	l, err := redislock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if got := redislock.Prefix(l); got != "idemkit" {
		t.Fatalf("default prefix %q", got)
	}
	if caps := l.Capabilities(); caps.Backend != "redis" || !caps.Fencing {
		t.Fatalf("capabilities %+v", caps)
	}
}

// TestNewRefusesClientsWithoutContextTimeouts: every go-redis client that
// would ignore ctx deadlines is refused with an error that says how to
// build it; the same clients with ContextTimeoutEnabled are accepted.
func TestNewRefusesClientsWithoutContextTimeouts(t *testing.T) {
	const addr = "127.0.0.1:1"
	for _, on := range []bool{false, true} {
		clients := map[string]redis.UniversalClient{
			"client":          redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: on}),
			"cluster client":  redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ContextTimeoutEnabled: on}),
			"ring":            redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}, ContextTimeoutEnabled: on}),
			"failover client": redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{addr}, ContextTimeoutEnabled: on}),
			"failover cluster client": redis.NewFailoverClusterClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{addr},
				ContextTimeoutEnabled: on}),
			"universal client": redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{addr}, ContextTimeoutEnabled: on}),
		}
		for name, c := range clients {
			_, err := redislock.New(c)
			_ = c.Close()
			switch {
			case on && err != nil:
				t.Errorf("%s with ContextTimeoutEnabled: %v", name, err)
			case !on && idemkit.CodeOf(err) != idemkit.CodeInvalidArgument:
				t.Errorf("%s without ContextTimeoutEnabled: %v; want InvalidArgument", name, err)
			case !on && !strings.Contains(err.Error(), "ContextTimeoutEnabled: true"):
				t.Errorf("%s: the error does not say what to do: %v", name, err)
			}
		}
	}
}

// TestStalledServer: a server that stops answering (SIGSTOP) gives every
// operation a coded timeout within the caller's deadline, never a hang.
func TestStalledServer(t *testing.T) {
	srv := testenv.NewRedis(t)
	c := clientFor(t, srv.Addr)
	l := newLocker(t, c)
	lease, ok, err := l.Acquire(t.Context(), "k", time.Minute) // connections are open before the stall
	if err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	resume := srv.Stall(t)
	defer resume()
	const deadline = 300 * time.Millisecond
	for _, tc := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Acquire", func(ctx context.Context) error { _, _, err := l.Acquire(ctx, "other", time.Minute); return err }},
		{"ReleaseKey", func(ctx context.Context) error { _, err := l.ReleaseKey(ctx, lease.Key, lease.ID); return err }},
		{"Release", func(ctx context.Context) error { _, err := l.Release(ctx, lease.ID); return err }},
		{"ExtendKey", func(ctx context.Context) error {
			_, err := l.ExtendKey(ctx, lease.Key, lease.ID, time.Minute)
			return err
		}},
		{"Extend", func(ctx context.Context) error { _, err := l.Extend(ctx, lease.ID, time.Minute); return err }},
		{"IsLocked", func(ctx context.Context) error { _, err := l.IsLocked(ctx, "k"); return err }},
		{"LookupKey", func(ctx context.Context) error { _, _, err := l.LookupKey(ctx, "k"); return err }},
		{"LookupID", func(ctx context.Context) error { _, _, err := l.LookupID(ctx, lease.ID); return err }},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), deadline)
		start := time.Now()
		err := tc.call(ctx)
		took := time.Since(start)
		cancel()
		if code := idemkit.CodeOf(err); code != idemkit.CodeNetworkTimeout && code != idemkit.CodeServiceUnavailable {
			t.Errorf("%s on a stalled server: %v; want NetworkTimeout or ServiceUnavailable", tc.name, err)
		}
		if took > deadline+2*time.Second {
			t.Errorf("%s on a stalled server took %v; want it bounded by the ctx deadline (%v)", tc.name, took, deadline)
		}
	}
	resume()
	if out, err := l.ReleaseKey(t.Context(), lease.Key, lease.ID); err != nil || !out.OK {
		t.Fatalf("ReleaseKey after the server resumed: %+v, %v", out, err)
	}
}

// TestAcquireIsIdempotentPerID: an acquire that is run again with the same
// lock id (go-redis retrying a script whose reply was lost) gets the same
// lease back rather than "locked", and issues no second fence.
func TestAcquireIsIdempotentPerID(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			l := newLocker(t, b.newClient(t))
			id := lock.NewID()
			first, ok1, err1 := redislock.AcquireAs(t.Context(), l, "retried", id, time.Minute)
			again, ok2, err2 := redislock.AcquireAs(t.Context(), l, "retried", id, time.Minute)
			if err1 != nil || err2 != nil || !ok1 || !ok2 || first != again {
				t.Fatalf("first %v (%v, %v), again %v (%v, %v); want the same lease", first, ok1, err1, again, ok2, err2)
			}
			if _, ok, err := l.Acquire(t.Context(), "retried", time.Minute); ok || err != nil {
				t.Fatalf("another id: %v, %v; want locked", ok, err)
			}
		})
	}
}

// TestFencesFromTheServerClock: with no counter, a key's first fence is
// the server's clock in milliseconds; after a release (also within the
// same millisecond) or an expiry the next one is greater; and nothing but
// the lock record is written (and the id's index hint with WithIDIndex).
func TestFencesFromTheServerClock(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			c := b.newClient(t)
			l := newLocker(t, c)
			before := serverNow(t, c).UnixMilli()
			lease, ok, err := l.Acquire(ctx, "k", time.Minute)
			if err != nil || !ok {
				t.Fatalf("Acquire: %v, %v", ok, err)
			}
			after := serverNow(t, c).UnixMilli()
			if f := int64(lease.Fence); f < before || f > after {
				t.Fatalf("first fence %d; want the server's clock in ms, within [%d, %d]", f, before, after)
			}
			if n, err := countKeys(ctx, c, redislock.Prefix(l)); err != nil || n != 1 {
				t.Fatalf("%d keys after one acquire (%v); want the lock record alone", n, err)
			}
			indexed := newLockerPrefixed(t, c, redislock.Prefix(l), redislock.WithIDIndex(true))
			if _, ok, err := indexed.Acquire(ctx, "other", time.Minute); err != nil || !ok {
				t.Fatalf("Acquire with the id index: %v, %v", ok, err)
			}
			if n, err := countKeys(ctx, c, redislock.Prefix(l)); err != nil || n != 3 {
				t.Fatalf("%d keys after an acquire with the id index (%v); want its lock record and index hint more", n, err)
			}
			name := redislock.LockName(l, "k")
			prev := lease
			for i := range 50 { // back to back: several cycles in one millisecond
				if out, err := l.ReleaseKey(ctx, prev.Key, prev.ID); err != nil || !out.OK {
					t.Fatalf("ReleaseKey %d: %+v, %v", i, out, err)
				}
				// Released: deleted, or a tombstone until the clock passes the
				// fence: one that keeps the fence, or a light one (1 ms) for a
				// compact lease released when its fence's millisecond may not
				// have passed.
				r, found, err := readRecord(ctx, c, name)
				if err != nil {
					t.Fatal(err)
				}
				light := r.kind == 'r' && r.id == redislock.TombstoneID
				if found && !light && (r.kind != 't' || r.id != redislock.TombstoneID || r.fence != prev.Fence || r.key != "") {
					t.Fatalf("after a release: %+v; want nothing or a tombstone with fence %v", r, prev.Fence)
				}
				lease, ok, err := l.Acquire(ctx, "k", time.Minute)
				if err != nil || !ok {
					t.Fatalf("Acquire %d: %v, %v", i, ok, err)
				}
				if lease.Fence <= prev.Fence {
					t.Fatalf("fence %v after %v; want greater", lease.Fence, prev.Fence)
				}
				prev = lease
			}

			// A lease that runs out: Redis removes its record, the next fence
			// is greater still.
			if out, err := l.ReleaseKey(ctx, prev.Key, prev.ID); err != nil || !out.OK {
				t.Fatalf("ReleaseKey: %+v, %v", out, err)
			}
			short, ok, err := l.Acquire(ctx, "k", 50*time.Millisecond)
			if err != nil || !ok {
				t.Fatalf("Acquire: %v, %v", ok, err)
			}
			time.Sleep(200 * time.Millisecond)
			if _, found, err := readRecord(ctx, c, name); err != nil || found {
				t.Fatalf("the record of a lease that ran out is still there (%v)", err)
			}
			next, ok, err := l.Acquire(ctx, "k", time.Minute)
			if err != nil || !ok || next.Fence <= short.Fence {
				t.Fatalf("Acquire after the expiry: fence %v after %v (%v, %v); want greater", next.Fence, short.Fence, ok, err)
			}
		})
	}
}

// TestIDIndex: without WithIDIndex, the ids of a Locker's own leases
// resolve from memory (one round trip), and another Locker (another
// process) cannot resolve them; with it, every Locker can release, extend
// and look up by id, and a release deletes the hint (on a single node) or
// leaves it to expire (on a cluster).
func TestIDIndex(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			mine := newLocker(t, b.newClient(t))
			theirs := newLockerPrefixed(t, b.newClient(t), redislock.Prefix(mine))
			lease, ok, err := mine.Acquire(ctx, "plain", time.Minute)
			if err != nil || !ok {
				t.Fatalf("Acquire: %v, %v", ok, err)
			}
			if info, found, err := mine.LookupID(ctx, lease.ID); err != nil || !found || info.Fence != lease.Fence {
				t.Fatalf("LookupID by the issuing locker: %v, %v, %v", info, found, err)
			}
			if _, found, err := theirs.LookupID(ctx, lease.ID); err != nil || found {
				t.Fatalf("LookupID by another locker without the index: %v, %v; want not found", found, err)
			}
			if out, err := theirs.Release(ctx, lease.ID); err != nil || out.OK || out.Reason != lock.ReasonNotFound {
				t.Fatalf("Release by another locker without the index: %+v, %v; want not found", out, err)
			}
			if out, err := mine.Extend(ctx, lease.ID, 2*time.Minute); err != nil || !out.OK {
				t.Fatalf("Extend by the issuing locker: %+v, %v", out, err)
			}
			if out, err := mine.Release(ctx, lease.ID); err != nil || !out.OK {
				t.Fatalf("Release by the issuing locker: %+v, %v", out, err)
			}
			if out, err := mine.Release(ctx, lease.ID); err != nil || out.OK || out.Reason != lock.ReasonNotFound {
				t.Fatalf("Release again: %+v, %v; want not found", out, err)
			}

			indexed := newLockerPrefixed(t, b.newClient(t), redislock.Prefix(mine), redislock.WithIDIndex(true))
			c := b.newClient(t)
			for _, byKey := range []bool{false, true} {
				k := fmt.Sprint("indexed-", byKey)
				lease, ok, err = indexed.Acquire(ctx, k, time.Minute)
				if err != nil || !ok {
					t.Fatalf("Acquire with the index: %v, %v", ok, err)
				}
				if info, found, err := lock.LookupIDRaw(ctx, theirs, lease.ID); err != nil || !found || info.Key != k || info.Fence != lease.Fence {
					t.Fatalf("LookupID by another locker with the index: %v, %v, %v", info, found, err)
				}
				if out, err := theirs.Extend(ctx, lease.ID, 2*time.Minute); err != nil || !out.OK {
					t.Fatalf("Extend by another locker with the index: %+v, %v", out, err)
				}
				hint := redislock.IndexName(indexed, lease.ID)
				if ttl, err := c.PTTL(ctx, hint).Result(); err != nil || ttl < time.Minute+30*time.Second {
					t.Fatalf("the hint's TTL after an extend to 2 minutes: %v, %v; want it lengthened", ttl, err)
				}
				var out lock.Outcome
				if byKey {
					out, err = indexed.ReleaseKey(ctx, k, lease.ID)
				} else {
					out, err = theirs.Release(ctx, lease.ID)
				}
				if err != nil || !out.OK {
					t.Fatalf("release (by key %v): %+v, %v", byKey, out, err)
				}
				n, err := c.Exists(ctx, hint).Result()
				if err != nil || (b.name == "single") != (n == 0) {
					t.Fatalf("the hint after the release: exists %d (%v); want it deleted on a single node and left to expire on a cluster", n, err)
				}
				if _, found, err := theirs.LookupID(ctx, lease.ID); err != nil || found {
					t.Fatalf("LookupID after the release: %v, %v", found, err)
				}
			}
		})
	}
}

// TestTombstones: a fence ahead of the server's clock (raised by an
// operator, or many leases in one millisecond) outlives its lease as a
// tombstone: not live, found by no id, acquirable, expiring once the clock
// passes the fence. An expired lease ahead of the clock stays recorded
// (ReasonExpired) until then, and IsLocked's cleanup ends it as a release
// would.
func TestTombstones(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			c := b.newClient(t)
			l := newLocker(t, c, redislock.WithCleanupInIsLocked(true))
			name := redislock.LockName(l, "k")
			ahead := idemkit.Fence(serverNow(t, c).Add(time.Hour).UnixMilli())
			if err := c.Set(ctx, name, rawTombstone(ahead), time.Hour+time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if locked, err := l.IsLocked(ctx, "k"); err != nil || locked {
				t.Fatalf("IsLocked over a tombstone: %v, %v", locked, err)
			}
			if _, found, err := l.LookupKey(ctx, "k"); err != nil || found {
				t.Fatalf("LookupKey over a tombstone: %v, %v", found, err)
			}
			lease, ok, err := l.Acquire(ctx, "k", time.Minute)
			if err != nil || !ok || lease.Fence != ahead+1 {
				t.Fatalf("Acquire over a tombstone: %v, %v, %v; want fence %v", lease, ok, err, ahead+1)
			}
			if out, err := l.Release(ctx, lease.ID); err != nil || !out.OK {
				t.Fatalf("Release: %+v, %v", out, err)
			}
			checkTombstone(t, c, name, ahead+1)
			if out, err := l.Release(ctx, lease.ID); err != nil || out.OK || out.Reason != lock.ReasonNotFound {
				t.Fatalf("Release again: %+v, %v; want not found", out, err)
			}
			if out, err := l.ExtendKey(ctx, lease.Key, lease.ID, time.Minute); err != nil || out.OK || out.Reason != lock.ReasonNotFound {
				t.Fatalf("ExtendKey of a released lease: %+v, %v; want not found", out, err)
			}
			if _, found, err := l.LookupID(ctx, lease.ID); err != nil || found {
				t.Fatalf("LookupID of a released lease: %v, %v", found, err)
			}

			// An expired lease ahead of the clock: still recorded.
			short, ok, err := l.Acquire(ctx, "k", 30*time.Millisecond)
			if err != nil || !ok || short.Fence != ahead+2 {
				t.Fatalf("Acquire: %v, %v, %v; want fence %v", short, ok, err, ahead+2)
			}
			time.Sleep(100 * time.Millisecond)
			if out, err := l.ReleaseKey(ctx, short.Key, short.ID); err != nil || out.Reason != lock.ReasonExpired {
				t.Fatalf("ReleaseKey of an expired lease: %+v, %v; want expired", out, err)
			}
			time.Sleep(lock.CleanupGrace)
			if locked, err := l.IsLocked(ctx, "k"); err != nil || locked {
				t.Fatalf("IsLocked: %v, %v", locked, err)
			}
			checkTombstone(t, c, name, ahead+2)
			next, ok, err := l.Acquire(ctx, "k", time.Minute)
			if err != nil || !ok || next.Fence != ahead+3 {
				t.Fatalf("Acquire after the cleanup: %v, %v, %v; want fence %v", next, ok, err, ahead+3)
			}
		})
	}
}

// TestScriptsLoadedAgainAfterFlush: when the server has lost the scripts
// (SCRIPT FLUSH, a restart, a failover to a replica that never ran them),
// an acquire that needs its script and a release each send the script's
// source and succeed, with and without the id index.
func TestScriptsLoadedAgainAfterFlush(t *testing.T) {
	for _, b := range backends() {
		for _, index := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/index=%v", b.name, index), func(t *testing.T) {
				ctx := t.Context()
				c := b.newClient(t)
				flush := func() {
					t.Helper()
					var err error
					if cc, ok := c.(*redis.ClusterClient); ok {
						err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.ScriptFlush(ctx).Err() })
					} else {
						err = c.ScriptFlush(ctx).Err()
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				l := newLocker(t, c, redislock.WithIDIndex(index))
				name := redislock.LockName(l, "k")
				// A tombstone ahead of the clock: the acquire goes through its
				// script, not the pipelined SET.
				ahead := idemkit.Fence(serverNow(t, c).Add(time.Hour).UnixMilli())
				if err := c.Set(ctx, name, rawTombstone(ahead), time.Hour+time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				flush()
				lease, ok, err := l.Acquire(ctx, "k", time.Minute)
				if err != nil || !ok || lease.Fence != ahead+1 {
					t.Fatalf("Acquire after SCRIPT FLUSH: %v, %v, %v; want fence %v", lease, ok, err, ahead+1)
				}
				flush()
				if out, err := l.ReleaseKey(ctx, lease.Key, lease.ID); err != nil || !out.OK {
					t.Fatalf("ReleaseKey after SCRIPT FLUSH: %+v, %v", out, err)
				}
				checkTombstone(t, c, name, ahead+1)
				if _, found, err := l.LookupID(ctx, lease.ID); err != nil || found {
					t.Fatalf("LookupID of the released lease: %v, %v", found, err)
				}
			})
		}
	}
}

// checkTombstone asserts that name holds a tombstone with fence f that
// expires just after the clock passes f.
func checkTombstone(t *testing.T, c redis.UniversalClient, name string, f idemkit.Fence) {
	t.Helper()
	r, found, err := readRecord(t.Context(), c, name)
	if err != nil || !found || r.id != redislock.TombstoneID || r.fence != f || r.key != "" {
		t.Fatalf("want a tombstone with fence %v; got %+v (found %v, %v)", f, r, found, err)
	}
	at, err := c.PExpireTime(t.Context(), name).Result()
	if err != nil || at.Milliseconds() != provider.KeepUntil(f, time.Time{}).UnixMilli() {
		t.Fatalf("the tombstone expires at %v (%v); want %v", at.Milliseconds(), err, provider.KeepUntil(f, time.Time{}).UnixMilli())
	}
}

// TestNoStateWithoutExpiry: after a burst of acquires, releases (by key
// and by id), extensions, contention, expiries and cleanups, every key the
// locker holds on the server has an expiry.
func TestNoStateWithoutExpiry(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			c := b.newClient(t)
			l := newLocker(t, c, redislock.WithCleanupInIsLocked(true))
			var held []lock.Lease
			for i := range 60 {
				k := fmt.Sprintf("k%d\x00{%d}", i%20, i%3)
				ttl := time.Minute
				if i%4 == 0 {
					ttl = 20 * time.Millisecond
				}
				lease, ok, err := l.Acquire(ctx, k, ttl)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					continue
				}
				switch i % 5 {
				case 0:
					_, err = l.ReleaseKey(ctx, lease.Key, lease.ID)
				case 1:
					_, err = l.Release(ctx, lease.ID)
				case 2:
					_, err = l.Extend(ctx, lease.ID, 2*time.Minute)
					held = append(held, lease)
				case 3:
					_, err = l.ExtendKey(ctx, lease.Key, lease.ID, 10*time.Millisecond)
				default:
					held = append(held, lease)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(100 * time.Millisecond)
			for i := range 20 {
				k := fmt.Sprintf("k%d\x00{%d}", i, i%3)
				if _, err := l.IsLocked(ctx, k); err != nil {
					t.Fatal(err)
				}
			}
			if n, err := countKeys(ctx, c, redislock.Prefix(l)); err != nil || n == 0 {
				t.Fatalf("%d keys (%v): the burst left nothing to check", n, err)
			}
			keys, err := persistentKeys(ctx, c, redislock.Prefix(l))
			if err != nil || len(keys) != 0 {
				t.Fatalf("keys without an expiry: %q (%v)", keys, err)
			}
			for _, lease := range held {
				if _, err := l.ReleaseKey(ctx, lease.Key, lease.ID); err != nil {
					t.Fatal(err)
				}
			}
			keys, err = persistentKeys(ctx, c, redislock.Prefix(l))
			if err != nil || len(keys) != 0 {
				t.Fatalf("keys without an expiry after the releases: %q (%v)", keys, err)
			}
		})
	}
}

// TestCleanupOnlyLongExpired exercises IsLocked's cleanup on records whose
// expiry an operator removed (Redis removes the others itself): a record
// expired less than the grace ago stays; one expired longer ago goes, or
// becomes a tombstone while the clock has not passed its fence.
func TestCleanupOnlyLongExpired(t *testing.T) {
	c := single(t)
	ctx := t.Context()
	for _, cleanup := range []bool{false, true} {
		l := newLocker(t, c, redislock.WithCleanupInIsLocked(cleanup))
		now := serverNow(t, c)
		for _, tc := range []struct {
			key       string
			expired   time.Duration
			fence     idemkit.Fence
			kept      bool // the record is still a record
			tombstone bool // it became a tombstone
		}{
			{"recent", lock.CleanupGrace - 500*time.Millisecond, 4, true, false},
			{"old", lock.CleanupGrace + 500*time.Millisecond, 4, !cleanup, false},
			{"old-ahead", lock.CleanupGrace + 500*time.Millisecond, idemkit.Fence(now.Add(time.Hour).UnixMilli()), !cleanup, cleanup},
		} {
			exp := now.Add(-tc.expired).UnixMilli()
			name := redislock.LockName(l, tc.key)
			if err := c.Set(ctx, name, rawRecord(lock.NewID(), tc.fence, exp-1000, exp, tc.key), 0).Err(); err != nil {
				t.Fatal(err)
			}
			locked, err := l.IsLocked(ctx, tc.key)
			if err != nil || locked {
				t.Fatalf("IsLocked(%s) = %v, %v; want false", tc.key, locked, err)
			}
			r, found, err := readRecord(ctx, c, name)
			if err != nil {
				t.Fatal(err)
			}
			kept := found && r.id != redislock.TombstoneID
			tomb := found && r.id == redislock.TombstoneID
			if kept != tc.kept || tomb != tc.tombstone {
				t.Fatalf("cleanup %v, %s: record kept %v, tombstone %v; want %v, %v", cleanup, tc.key, kept, tomb, tc.kept, tc.tombstone)
			}
			if tomb {
				checkTombstone(t, c, name, tc.fence)
			}
		}
	}
}

// TestMalformedStateIsInternal: records and index hints that this package
// did not write give Internal errors, never a wrong answer.
func TestMalformedStateIsInternal(t *testing.T) {
	c := single(t)
	ctx := t.Context()
	l := newLocker(t, c)
	if err := c.Set(ctx, redislock.LockName(l, "short"), "garbage", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.LookupKey(ctx, "short"); idemkit.CodeOf(err) != idemkit.CodeInternal {
		t.Fatalf("LookupKey of a malformed record: %v; want Internal", err)
	}
	if _, _, err := l.Acquire(ctx, "short", time.Minute); idemkit.CodeOf(err) != idemkit.CodeInternal {
		t.Fatalf("Acquire over a malformed record: %v; want Internal", err)
	}
	id := lock.NewID()
	if err := c.Set(ctx, redislock.IndexName(l, id), "elsewhere", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Release(ctx, id); idemkit.CodeOf(err) != idemkit.CodeInternal {
		t.Fatalf("Release through an index hint that names no lock: %v; want Internal", err)
	}
	now := serverNow(t, c).UnixMilli()
	bad := lock.NewID() + "f" + "not-a-number-00" + pad(now-2000) + pad(now-1000) + "nan"
	if err := c.Set(ctx, redislock.LockName(l, "nan"), bad, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Acquire(ctx, "nan", time.Minute); idemkit.CodeOf(err) != idemkit.CodeInternal {
		t.Fatalf("Acquire over a record with a corrupt fence: %v; want Internal", err)
	}
	if locked, _ := l.IsLocked(ctx, "nan"); locked {
		t.Fatal("a failed acquire left a lock")
	}
}

// TestNamesAreInjective: distinct keys and prefixes never share a lock
// record, and no key names an index hint, whatever bytes the keys hold.
func TestNamesAreInjective(t *testing.T) {
	keys := []string{"a", "b", "a:b", "a:{b}", "{a}:b", "k:a", "h:a", "l:a", "f:a", "i", ":i", "}:i", "{x}:i",
		"a\x00", "\x00a", "\xff", "{a}", "{{a}", "{a}}", "a{", "a}", " ", "caf\u00e9", strings.Repeat("k", 512)}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer c.Close()
	seen := make(map[string]string)
	add := func(name, what string) {
		if prev, dup := seen[name]; dup {
			t.Fatalf("%s and %s share the name %q", prev, what, name)
		}
		seen[name] = what
	}
	for _, prefix := range []string{"p", "p:p", "p:", "pp"} {
		l, err := redislock.New(c, redislock.WithKeyPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			add(redislock.LockName(l, k), fmt.Sprintf("lock(%s, %q)", prefix, k))
		}
		for _, id := range []string{lock.NewID(), lock.NewID()} {
			add(redislock.IndexName(l, id), fmt.Sprintf("index(%s, %q)", prefix, id))
		}
	}
}

// TestNamesStayOnTheirSlot asks a cluster node where lock records land:
// a key's own hash tag chooses the slot, other keys spread.
func TestNamesStayOnTheirSlot(t *testing.T) {
	c := cluster(t).(*redis.ClusterClient)
	ctx := t.Context()
	slot := func(k string) int64 {
		t.Helper()
		s, err := c.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		return s
	}
	l := newLocker(t, c)
	if a, b := slot(redislock.LockName(l, "x:{user1}:a")), slot(redislock.LockName(l, "y:{user1}:b")); a != b || a != slot("user1") {
		t.Errorf("keys with one hash tag are on slots %d and %d; want %d", a, b, slot("user1"))
	}
	slots := make(map[int64]bool)
	for i := range 50 {
		slots[slot(redislock.LockName(l, fmt.Sprint("key-", i)))] = true
	}
	if len(slots) < 40 {
		t.Errorf("50 keys landed on %d slots; want them spread", len(slots))
	}
	id := lock.NewID()
	if slot(redislock.IndexName(l, id)) != slot(id) {
		t.Errorf("the index hint of %q is not on the id's own slot", id)
	}
}

// TestWaitForReplicas: with a replica attached, an acquire waits for its
// acknowledgement and succeeds; without one, the acquire fails with
// ServiceUnavailable and gives the lease back.
func TestWaitForReplicas(t *testing.T) {
	ctx := t.Context()
	pc, rc := replicatedPair(t)

	l := newLocker(t, pc, redislock.WithWaitForReplicas(1, 2*time.Second))
	lease, ok, err := l.Acquire(ctx, "k", time.Minute)
	if err != nil || !ok {
		t.Fatalf("Acquire with an attached replica: %v, %v", ok, err)
	}
	if r, found, err := readRecord(ctx, rc, redislock.LockName(l, "k")); err != nil || !found || r.id != lease.ID || r.fence != lease.Fence {
		t.Fatalf("the replica's lock record: %+v, %v, %v; want the lease as soon as it is handed out", r, found, err)
	}
	if info, ok, err := l.LookupID(ctx, lease.ID); err != nil || !ok || info.Fence != lease.Fence {
		t.Fatalf("LookupID after a durable acquire: %v, %v, %v", info, ok, err)
	}

	lonely := newLocker(t, clientFor(t, testenv.NewRedis(t).Addr), redislock.WithWaitForReplicas(1, 20*time.Millisecond))
	checkRefusedDurably(t, lonely, "lonely")
}

// TestWaitForReplicasOnCluster: the wait runs on the connection to the
// master of the lock's slot (the test cluster has no replicas: refused),
// for acquires and for extends.
func TestWaitForReplicasOnCluster(t *testing.T) {
	c := cluster(t)
	l := newLocker(t, c, redislock.WithWaitForReplicas(1, 20*time.Millisecond))
	for _, k := range []string{"a", "b", "c", "d"} {
		checkRefusedDurably(t, l, k)
		checkExtendUnacknowledged(t, c, redislock.WithWaitForReplicas(1, 20*time.Millisecond), k)
	}
}

// TestWaitForReplicasOnExtend: with the wait option an extend counts only
// once a replica acknowledged it: with a replica attached, Extend and
// ExtendKey succeed (also when the master lost its script cache, as after
// a failover) and the replica has the new expiry as soon as they return;
// without a replica they fail with ServiceUnavailable, and the lease stays
// as the master has it.
func TestWaitForReplicasOnExtend(t *testing.T) {
	ctx := t.Context()
	pc, rc := replicatedPair(t)

	for _, index := range []bool{false, true} {
		l := newLocker(t, pc, redislock.WithWaitForReplicas(1, 2*time.Second), redislock.WithIDIndex(index))
		key := fmt.Sprint("k-", index)
		lease, ok, err := l.Acquire(ctx, key, time.Minute)
		if err != nil || !ok {
			t.Fatalf("Acquire with an attached replica: %v, %v", ok, err)
		}
		for i, extend := range []func(ttl time.Duration) (lock.Outcome, error){
			func(ttl time.Duration) (lock.Outcome, error) { return l.ExtendKey(ctx, key, lease.ID, ttl) },
			func(ttl time.Duration) (lock.Outcome, error) { return l.Extend(ctx, lease.ID, ttl) },
		} {
			if i == 1 {
				// NOSCRIPT: the pipeline is sent again with the source.
				if err := pc.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			ttl := time.Duration(2+i) * time.Minute
			out, err := extend(ttl)
			if err != nil || !out.OK {
				t.Fatalf("extend %d (index %v) with an attached replica: %+v, %v", i, index, out, err)
			}
			r, found, err := readRecord(ctx, rc, redislock.LockName(l, key))
			if err != nil || !found || r.id != lease.ID || r.expires != out.ExpiresAt.UnixMilli() {
				t.Fatalf("the replica's record after extend %d: %+v, %v, %v; want expiry %v", i, r, found, err, out.ExpiresAt.UnixMilli())
			}
			if pttl, err := rc.PTTL(ctx, redislock.LockName(l, key)).Result(); err != nil || pttl < ttl-time.Minute/2 {
				t.Fatalf("the replica's record's PTTL after extend %d: %v, %v; want about %v", i, pttl, err, ttl)
			}
			if index {
				if pttl, err := rc.PTTL(ctx, redislock.IndexName(l, lease.ID)).Result(); err != nil || pttl < ttl-time.Minute/2 {
					t.Fatalf("the replica's index hint's PTTL after extend %d: %v, %v; want about %v", i, pttl, err, ttl)
				}
			}
		}
	}

	lonely := clientFor(t, testenv.NewRedis(t).Addr)
	checkExtendUnacknowledged(t, lonely, redislock.WithWaitForReplicas(1, 20*time.Millisecond), "lonely")
}

// checkExtendUnacknowledged checks that a locker on c with wait, a wait
// option that no replica can satisfy, refuses an extend of a lease that a
// locker without it (the same prefix) acquired for key:
// ServiceUnavailable, while the master has the new expiry. An extend that
// finds no lease reports it as usual.
func checkExtendUnacknowledged(t *testing.T, c redis.UniversalClient, wait redislock.Option, key string) {
	t.Helper()
	ctx := t.Context()
	plain := newLocker(t, c)
	durable := newLocker(t, c, redislock.WithKeyPrefix(redislock.Prefix(plain)), wait)
	lease, ok, err := plain.Acquire(ctx, key+"-extended", time.Minute)
	if err != nil || !ok {
		t.Fatalf("plain Acquire: %v, %v", ok, err)
	}
	before := serverNow(t, c)
	out, err := durable.ExtendKey(ctx, lease.Key, lease.ID, 10*time.Minute)
	if out.OK || idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable {
		t.Fatalf("ExtendKey(%s) without enough replicas: %+v, %v; want ServiceUnavailable", key, out, err)
	}
	r, found, err := readRecord(ctx, c, redislock.LockName(plain, lease.Key))
	if err != nil || !found || r.id != lease.ID || r.expires < before.Add(10*time.Minute).UnixMilli() {
		t.Fatalf("the master's record after an unacknowledged extend: %+v, %v, %v; want it extended", r, found, err)
	}
	if out, err := durable.ExtendKey(ctx, key+"-absent", lease.ID, time.Minute); err != nil || out.Reason != lock.ReasonNotFound {
		t.Fatalf("ExtendKey of no lease without enough replicas: %+v, %v; want not found", out, err)
	}
}

// TestAcquireRetryWrites: an acquire retried with the same lock id that
// finds its own live lease writes (the record's expiry, unchanged), so
// that the WAIT of a durable acquire on its connection covers the lease
// even when the first attempt's write was never acknowledged.
func TestAcquireRetryWrites(t *testing.T) {
	ctx := t.Context()
	c := clientFor(t, testenv.NewRedis(t).Addr) // no saves: the dirty counter only grows
	l := newLocker(t, c)
	id := lock.NewID()
	first, ok, err := redislock.AcquireAs(ctx, l, "retried", id, time.Minute)
	if err != nil || !ok {
		t.Fatalf("AcquireAs: %v, %v", ok, err)
	}
	pttl := c.PTTL(ctx, redislock.LockName(l, "retried")).Val()
	dirty := dirtyCount(t, c)
	again, ok, err := redislock.AcquireAs(ctx, l, "retried", id, time.Minute)
	if err != nil || !ok || again != first {
		t.Fatalf("AcquireAs again: %v, %v, %v; want %v", again, ok, err, first)
	}
	if after := dirtyCount(t, c); after <= dirty {
		t.Fatalf("the retried acquire wrote nothing (changes %d, then %d); a WAIT on its connection would not cover the lease", dirty, after)
	}
	if now := c.PTTL(ctx, redislock.LockName(l, "retried")).Val(); now > pttl || now < pttl-5*time.Second {
		t.Fatalf("the record's PTTL after the retry: %v, before %v; want the expiry unchanged", now, pttl)
	}
}

// dirtyCount returns how many writes the server made since its last save.
func dirtyCount(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(t.Context(), "persistence").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		var n int64
		if _, err := fmt.Sscanf(strings.TrimSpace(line), "rdb_changes_since_last_save:%d", &n); err == nil {
			return n
		}
	}
	t.Fatal("INFO persistence has no rdb_changes_since_last_save")
	return 0
}

// TestWaitForAOF: WAITAOF needs Redis 7.2; on an older server the acquire
// fails (the command is unknown) and gives the lease back; on a newer one
// the local fsync is acknowledged.
func TestWaitForAOF(t *testing.T) {
	c := single(t)
	l := newLocker(t, c, redislock.WithWaitForAOF(true, 0, time.Second))
	info, err := c.Info(t.Context(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	lease, ok, err := l.Acquire(t.Context(), "k", time.Minute)
	if supportsWaitAOF(info) {
		if err != nil || !ok {
			t.Fatalf("Acquire with WAITAOF on a server that has it: %v, %v", ok, err)
		}
		if out, err := l.ExtendKey(t.Context(), "k", lease.ID, 2*time.Minute); err != nil || !out.OK {
			t.Fatalf("ExtendKey with WAITAOF on a server that has it: %+v, %v", out, err)
		}
		return
	}
	if err == nil || ok {
		t.Fatalf("Acquire with WAITAOF on a server without it: %v, %v; want an error", lease, err)
	}
	if locked, _ := l.IsLocked(t.Context(), "k"); locked {
		t.Fatal("the lease was not given back")
	}
}

func supportsWaitAOF(info string) bool {
	var major, minor int
	for _, line := range strings.Split(info, "\n") {
		if _, err := fmt.Sscanf(line, "redis_version:%d.%d", &major, &minor); err == nil {
			return major > 7 || major == 7 && minor >= 2
		}
	}
	return false
}

func checkRefusedDurably(t *testing.T, l *redislock.Locker, k string) {
	t.Helper()
	_, ok, err := l.Acquire(t.Context(), k, time.Minute)
	if ok || idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable {
		t.Fatalf("Acquire(%s) without enough replicas: %v, %v; want ServiceUnavailable", k, ok, err)
	}
	if locked, err := l.IsLocked(t.Context(), k); err != nil || locked {
		t.Fatalf("IsLocked(%s) after a refused durable acquire: %v, %v; want the lease given back", k, locked, err)
	}
}

// replicatedPair starts a master and a replica of it for this test alone,
// and returns clients of both once the replica is online.
func replicatedPair(t *testing.T) (primary, replica *redis.Client) {
	t.Helper()
	p, r := testenv.NewRedis(t), testenv.NewRedis(t)
	host, port, _ := net.SplitHostPort(p.Addr)
	replica = clientFor(t, r.Addr)
	if err := replica.SlaveOf(t.Context(), host, port).Err(); err != nil {
		t.Fatal(err)
	}
	primary = clientFor(t, p.Addr)
	waitReplicaOnline(t, primary)
	return primary, replica
}

func waitReplicaOnline(t *testing.T, primary *redis.Client) {
	t.Helper()
	guard := time.Now().Add(30 * time.Second)
	for time.Now().Before(guard) {
		n, err := primary.Wait(t.Context(), 1, 100*time.Millisecond).Result()
		if err == nil && n >= 1 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the replica never came online")
}

// TestPlainClientOnClusterEndpoint: a plain client on a cluster-mode node
// meets CROSSSLOT on its first acquire (the index hint is on another slot);
// the locker then keeps every script on one key. On a multi-node cluster
// such a client reaches only the node's own slots, so the test looks for a
// key (and lock id) that node owns; every attempt that fails fails cleanly.
func TestPlainClientOnClusterEndpoint(t *testing.T) {
	c := noRetry(t, &redis.Options{Addr: testenv.RedisCluster(t).Addrs[0]})
	l := newLocker(t, c)
	for i := range 500 {
		k := fmt.Sprint("plain-", i)
		lease, ok, err := l.Acquire(t.Context(), k, time.Minute)
		if err != nil {
			if code := idemkit.CodeOf(err); code != idemkit.CodeServiceUnavailable {
				t.Fatalf("acquire %s: %v; want success or MOVED (ServiceUnavailable)", k, err)
			}
			continue
		}
		if !ok {
			t.Fatalf("acquire %s: contention on a fresh key", k)
		}
		if out, err := l.ReleaseKey(t.Context(), k, lease.ID); err != nil || !out.OK {
			t.Fatalf("ReleaseKey: %+v, %v", out, err)
		}
		return
	}
	t.Fatal("no acquire succeeded through the plain client")
}

// TestProxyWithoutPEXPIRETIME: behind a proxy that lacks PEXPIRETIME (but
// runs scripts), the first acquire's pipeline is refused after its SET went
// through; the acquire script, run with the same lock id, reads that lease
// back, and from then on the locker acquires by script alone.
func TestProxyWithoutPEXPIRETIME(t *testing.T) {
	srv := testenv.Redis(t)
	p := newProxy(t, srv.Addr, 0, "pexpiretime")
	direct := single(t)
	l := newLocker(t, clientFor(t, p.Addr))
	ctx := t.Context()
	for i := range 5 {
		k := fmt.Sprint("k", i)
		lease, ok, err := l.Acquire(ctx, k, time.Minute)
		if err != nil || !ok {
			t.Fatalf("Acquire %s through the proxy: %v, %v", k, ok, err)
		}
		r, found, err := readRecord(ctx, direct, redislock.LockName(l, k))
		if err != nil || !found || r.id != lease.ID || r.fence != lease.Fence {
			t.Fatalf("the record of %s: %+v (found %v, %v); want the lease %v", k, r, found, err, lease)
		}
		if out, err := l.ReleaseKey(ctx, k, lease.ID); err != nil || !out.OK {
			t.Fatalf("ReleaseKey %s: %+v, %v", k, out, err)
		}
	}
	if n := p.refusals("pexpiretime"); n != 1 {
		t.Fatalf("the proxy refused PEXPIRETIME %d times; want once (then scripts alone)", n)
	}
}

// TestSlowRepliesReadTheLeaseBack: when the answer to an acquire's
// pipeline takes half the TTL or more, the lease could have run out and
// been taken over between its SET and the read of its expiry; the acquire
// then reads its lease back atomically with the acquire script (or finds it
// taken). A locker behind a proxy that delays every reply by 4 ms races for
// a key of 3 ms leases with a locker on a direct connection, which tries
// the key every half millisecond: no fence is ever granted twice.
func TestSlowRepliesReadTheLeaseBack(t *testing.T) {
	srv := testenv.Redis(t)
	p := newProxy(t, srv.Addr, 4*time.Millisecond)
	slow := newLocker(t, clientFor(t, p.Addr))
	fast := newLockerPrefixed(t, clientFor(t, srv.Addr), redislock.Prefix(slow))
	ctx := t.Context()
	var (
		mu     sync.Mutex
		fences = map[idemkit.Fence]string{}
		wins   = map[string]int{}
		done   = make(chan struct{})
		wg     sync.WaitGroup
	)
	grant := func(who string, lease lock.Lease) {
		mu.Lock()
		defer mu.Unlock()
		wins[who]++
		if other, dup := fences[lease.Fence]; dup {
			t.Errorf("fence %v granted twice: to the %s locker and to the %s locker", lease.Fence, other, who)
		}
		fences[lease.Fence] = who
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			lease, ok, err := fast.Acquire(ctx, "k", 3*time.Millisecond)
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				grant("fast", lease)
			}
			time.Sleep(500 * time.Microsecond)
		}
	}()
	for range 50 {
		lease, ok, err := slow.Acquire(ctx, "k", 3*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			grant("slow", lease)
		}
	}
	close(done)
	wg.Wait()
	t.Logf("wins: %v", wins)
	if wins["fast"] < 10 {
		t.Fatalf("the direct locker was granted %d leases; want it to take the key whenever it is free", wins["fast"])
	}
}

// TestReleaseLongAfterTheGrant: a lease released by its Locker more than
// 2 ms after the grant is deleted without a look at the clock (the fence is
// behind it); the next lease still gets a greater fence.
func TestReleaseLongAfterTheGrant(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			c := b.newClient(t)
			l := newLocker(t, c)
			prev, ok, err := l.Acquire(ctx, "k", time.Minute)
			if err != nil || !ok {
				t.Fatalf("Acquire: %v, %v", ok, err)
			}
			for range 5 {
				time.Sleep(5 * time.Millisecond)
				if out, err := l.ReleaseKey(ctx, "k", prev.ID); err != nil || !out.OK {
					t.Fatalf("ReleaseKey: %+v, %v", out, err)
				}
				if _, found, err := readRecord(ctx, c, redislock.LockName(l, "k")); err != nil || found {
					t.Fatalf("the record after a release 5 ms after its grant: found %v (%v); want it deleted", found, err)
				}
				next, ok, err := l.Acquire(ctx, "k", time.Minute)
				if err != nil || !ok || next.Fence <= prev.Fence {
					t.Fatalf("Acquire: fence %v after %v (%v, %v); want greater", next.Fence, prev.Fence, ok, err)
				}
				prev = next
			}
		})
	}
}
