package redislock_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/idemkit/idemkit/lock/redislock/redistest"
	"github.com/redis/go-redis/v9"
)

func newLocker(t *testing.T, c redis.UniversalClient, opts ...redislock.Option) *redislock.Locker {
	t.Helper()
	l, err := redislock.New(c, append([]redislock.Option{redislock.WithKeyPrefix(testenv.Name(t))}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

func TestNewValidates(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opts   []redislock.Option
	}{
		{"nil client", nil, nil},
		{"bad prefix", c, []redislock.Option{redislock.WithKeyPrefix("a{b}")}},
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
	l, err := redislock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Layout().Prefix(); got != redislock.DefaultKeyPrefix {
		t.Fatalf("default prefix %q", got)
	}
	if caps := l.Capabilities(); caps.Backend != "redis" || !caps.Fencing || caps.TimeAuthority != lock.TimeServer {
		t.Fatalf("capabilities %+v", caps)
	}
}

func TestSameLocks(t *testing.T) {
	c1, c2 := redistest.Single(t), redistest.Single(t)
	base := newLocker(t, c1)
	prefix := base.Layout().Prefix()
	mk := func(c redis.UniversalClient, opts ...redislock.Option) *redislock.Locker {
		l, err := redislock.New(c, append([]redislock.Option{redislock.WithKeyPrefix(prefix)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, tc := range []struct {
		name string
		l    *redislock.Locker
		want bool
	}{
		{"itself", base, true},
		{"same client and prefix, other logger", mk(c1, redislock.WithCleanupInIsLocked(true)), true},
		{"another client", mk(c2), false},
		{"another prefix", newLocker(t, c1), false},
		{"waits for replicas", mk(c1, redislock.WithWaitForReplicas(1, time.Second)), false},
		{"nil", nil, false},
	} {
		if got := base.SameLocks(tc.l); got != tc.want {
			t.Errorf("%s: SameLocks = %v; want %v", tc.name, got, tc.want)
		}
	}
}

// TestAcquireIsIdempotentPerID: an acquire that is run again with the same
// lock id (go-redis retrying a script whose reply was lost) gets the same
// lease back rather than "locked", and consumes no second fence.
func TestAcquireIsIdempotentPerID(t *testing.T) {
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			c := b.NewClient(t)
			layout := newLocker(t, c).Layout()
			script := redislock.NewScript(`return lock_acquire(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), '')`)
			k := "retried"
			keys := []string{layout.Lock(k), layout.Fence(k)}
			id := lock.NewID()
			run := func(id string) []any {
				t.Helper()
				v, err := script.Run(t.Context(), c, keys, id, 60000, k, uint64(lock.FenceMax)).Slice()
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			first, again := run(id), run(id)
			if fmt.Sprint(first) != fmt.Sprint(again) || first[0] != int64(1) || first[1] != int64(1) {
				t.Fatalf("first %v, again %v; want the same lease with fence 1", first, again)
			}
			if other := run(lock.NewID()); other[0] != int64(0) {
				t.Fatalf("another id: %v; want locked", other)
			}
		})
	}
}

// TestCleanupOnlyLongExpired exercises IsLocked's cleanup on records that
// lost their TTL (Redis deletes the others itself): a record expired less
// than the grace ago stays, one expired longer ago goes, the fence stays.
func TestCleanupOnlyLongExpired(t *testing.T) {
	c := redistest.Single(t)
	ctx := t.Context()
	for _, cleanup := range []bool{false, true} {
		l := newLocker(t, c, redislock.WithCleanupInIsLocked(cleanup))
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			key     string
			expired time.Duration
			kept    bool
		}{
			{"recent", lock.CleanupGrace - 500*time.Millisecond, true},
			{"old", lock.CleanupGrace + 500*time.Millisecond, !cleanup},
		} {
			exp := now.Add(-tc.expired).UnixMilli()
			rec := fmt.Sprintf("%s%015d%015d%015d%s", lock.NewID(), 4, exp-1000, exp, tc.key)
			if err := c.Set(ctx, l.Layout().Lock(tc.key), rec, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.Set(ctx, l.Layout().Fence(tc.key), 4, 0).Err(); err != nil {
				t.Fatal(err)
			}
			locked, err := l.IsLocked(ctx, tc.key)
			if err != nil || locked {
				t.Fatalf("IsLocked(%s) = %v, %v; want false", tc.key, locked, err)
			}
			n, _ := c.Exists(ctx, l.Layout().Lock(tc.key)).Result()
			if (n == 1) != tc.kept {
				t.Fatalf("cleanup %v, record expired %v ago: kept = %v; want %v", cleanup, tc.expired, n == 1, tc.kept)
			}
			if f, _ := c.Get(ctx, l.Layout().Fence(tc.key)).Int(); f != 4 {
				t.Fatalf("the fence counter changed to %d", f)
			}
		}
	}
}

// TestMalformedStateIsInternal: records and index entries that this
// package did not write give Internal errors, never a wrong answer.
func TestMalformedStateIsInternal(t *testing.T) {
	c := redistest.Single(t)
	ctx := t.Context()
	l := newLocker(t, c)
	if err := c.Set(ctx, l.Layout().Lock("short"), "garbage", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.LookupKey(ctx, "short"); idemkit.CodeOf(err) != idemkit.CodeInternal {
		t.Fatalf("LookupKey of a malformed record: %v; want Internal", err)
	}
	id := lock.NewID()
	if err := c.Set(ctx, l.Layout().Index(id), "elsewhere", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Release(ctx, id); idemkit.CodeOf(err) != idemkit.CodeInternal {
		t.Fatalf("Release through an index that names no lock: %v; want Internal", err)
	}
	if err := c.Set(ctx, l.Layout().Fence("nan"), "not a number", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Acquire(ctx, "nan", time.Minute); idemkit.CodeOf(err) != idemkit.CodeInternal {
		t.Fatalf("Acquire over a corrupt fence counter: %v; want Internal", err)
	}
	if locked, _ := l.IsLocked(ctx, "nan"); locked {
		t.Fatal("a failed acquire left a lock")
	}
}

// TestWithRefusesForeignSlots: the combined-script helpers refuse
// keys off the lock's slot before any I/O.
func TestWithRefusesForeignSlots(t *testing.T) {
	l := newLocker(t, redistest.Single(t))
	script := redislock.NewScript(`return {lock_acquire_call()}`)
	_, _, _, err := l.AcquireWith(t.Context(), script, "ns:lock:{a}", time.Minute, []string{l.Layout().Record("ns:record:{b}")})
	if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("AcquireWith with a key on another slot: %v; want InvalidArgument", err)
	}
	_, _, err = l.ReleaseWith(t.Context(), script, "ns:lock:{a}", lock.NewID(), []string{"plain"})
	if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("ReleaseWith with an untagged key: %v; want InvalidArgument", err)
	}
	lease, ok, extra, err := l.AcquireWith(t.Context(), script, "ns:lock:{a}", time.Minute, []string{l.Layout().Record("ns:record:{a}")})
	if err != nil || !ok || len(extra) != 0 || lease.Fence != 1 {
		t.Fatalf("AcquireWith on one slot: %v, %v, %v, %v", lease, ok, extra, err)
	}
}

// TestWaitForReplicas: with a replica attached, an acquire waits for its
// acknowledgement and succeeds; without one, the acquire fails with
// ServiceUnavailable and gives the lease back.
func TestWaitForReplicas(t *testing.T) {
	ctx := t.Context()
	primary, replica := testenv.NewRedis(t), testenv.NewRedis(t)
	host, port, _ := net.SplitHostPort(primary.Addr)
	if err := redistest.ClientFor(t, replica.Addr).SlaveOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	pc := redistest.ClientFor(t, primary.Addr)
	waitReplicaOnline(t, pc)

	l := newLocker(t, pc, redislock.WithWaitForReplicas(1, 2*time.Second))
	lease, ok, err := l.Acquire(ctx, "k", time.Minute)
	if err != nil || !ok {
		t.Fatalf("Acquire with an attached replica: %v, %v", ok, err)
	}
	rc := redistest.ClientFor(t, replica.Addr)
	if f, err := rc.Get(ctx, l.Layout().Fence("k")).Int(); err != nil || f != int(lease.Fence) {
		t.Fatalf("the replica's fence counter: %d, %v; want %v as soon as the lease is handed out", f, err, lease.Fence)
	}
	if info, ok, err := l.LookupID(ctx, lease.ID); err != nil || !ok || info.Fence != lease.Fence {
		t.Fatalf("LookupID after a durable acquire: %v, %v, %v", info, ok, err)
	}

	lonely := newLocker(t, redistest.ClientFor(t, testenv.NewRedis(t).Addr), redislock.WithWaitForReplicas(1, 20*time.Millisecond))
	checkRefusedDurably(t, lonely, "lonely")
}

// TestWaitForReplicasOnCluster: the wait runs on the connection to the
// master of the lock's slot (the test cluster has no replicas: refused).
func TestWaitForReplicasOnCluster(t *testing.T) {
	l := newLocker(t, redistest.Cluster(t), redislock.WithWaitForReplicas(1, 20*time.Millisecond))
	for _, k := range []string{"a", "b", "c", "d"} {
		checkRefusedDurably(t, l, k)
	}
}

// TestWaitForAOF: WAITAOF needs Redis 7.2; on an older server the acquire
// fails (the command is unknown) and gives the lease back; on a newer one
// the local fsync is acknowledged.
func TestWaitForAOF(t *testing.T) {
	c := redistest.Single(t)
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
	for _, line := range splitLines(info) {
		if _, err := fmt.Sscanf(line, "redis_version:%d.%d", &major, &minor); err == nil {
			return major > 7 || major == 7 && minor >= 2
		}
	}
	return false
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
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
// the locker then keeps every script on one slot. On a multi-node cluster
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
