package redisstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/leased"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
)

func TestNewValidates(t *testing.T) {
	ok := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer ok.Close()
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opts   []redisstore.Option
	}{
		{"nil client", nil, nil},
		{"prefix with a space", ok, []redisstore.Option{redisstore.WithKeyPrefix("a b")}},
		{"prefix with a control byte", ok, []redisstore.Option{redisstore.WithKeyPrefix("a\nb")}},
		{"prefix too long", ok, []redisstore.Option{redisstore.WithKeyPrefix(strings.Repeat("p", 65))}},
		{"zero limit", ok, []redisstore.Option{redisstore.WithMaxResponseBytes(0)}},
		{"limit past Redis's", ok, []redisstore.Option{redisstore.WithMaxResponseBytes(512<<20 + 1)}},
		{"negative clock step", ok, []redisstore.Option{redisstore.WithMaxClockStep(-time.Millisecond)}},
		{"no replicas to wait for", ok, []redisstore.Option{redisstore.WithWaitForReplicas(0, time.Second)}},
		{"wait under 1ms", ok, []redisstore.Option{redisstore.WithWaitForReplicas(1, time.Microsecond)}},
		{"AOF wait for nothing", ok, []redisstore.Option{redisstore.WithWaitForAOF(false, 0, time.Second)}},
		{"AOF wait for negative replicas", ok, []redisstore.Option{redisstore.WithWaitForAOF(true, -1, time.Second)}},
		{"both waits", ok, []redisstore.Option{redisstore.WithWaitForReplicas(1, time.Second), redisstore.WithWaitForAOF(true, 0, time.Second)}},
	} {
		if _, err := redisstore.New(tc.client, tc.opts...); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Errorf("%s: New = %v; want InvalidArgument", tc.name, err)
		}
	}
	for _, opts := range [][]redisstore.Option{
		nil,
		{redisstore.WithKeyPrefix(strings.Repeat("p", 64))},
		{redisstore.WithKeyPrefix("shop:"), redisstore.WithMaxResponseBytes(512 << 20)},
		{redisstore.WithMaxClockStep(0)},
		{redisstore.WithMaxClockStep(time.Hour), redisstore.WithWaitForAOF(true, 0, time.Second)},
		{redisstore.WithWaitForReplicas(1, time.Millisecond)},
	} {
		if _, err := redisstore.New(ok, opts...); err != nil {
			t.Errorf("New with valid options: %v", err)
		}
	}
}

// TestNewRefusesClientsWithoutContextTimeouts: every go-redis client kind
// built without ContextTimeoutEnabled is refused with a message naming the
// setting; with it, accepted.
func TestNewRefusesClientsWithoutContextTimeouts(t *testing.T) {
	for _, tc := range []struct {
		name string
		mk   func(on bool) redis.UniversalClient
	}{
		{"client", func(on bool) redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: on})
		}},
		{"failover client", func(on bool) redis.UniversalClient {
			return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: on})
		}},
		{"cluster client", func(on bool) redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: on})
		}},
		{"failover cluster client", func(on bool) redis.UniversalClient {
			return redis.NewFailoverClusterClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: on})
		}},
		{"ring", func(on bool) redis.UniversalClient {
			return redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: on})
		}},
		{"universal client", func(on bool) redis.UniversalClient {
			return redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: on})
		}},
	} {
		off := tc.mk(false)
		_, err := redisstore.New(off)
		_ = off.Close()
		if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !strings.Contains(err.Error(), "ContextTimeoutEnabled: true") {
			t.Errorf("%s without ContextTimeoutEnabled: New = %v; want InvalidArgument naming the setting", tc.name, err)
		}
		on := tc.mk(true)
		_, err = redisstore.New(on)
		_ = on.Close()
		if err != nil {
			t.Errorf("%s with ContextTimeoutEnabled: New = %v", tc.name, err)
		}
	}
}

// keyCases are record keys around every rule of the key encoding.
func keyCases() map[string]string {
	long := strings.Repeat("k", 512)
	collide := "@sha256:" + base64.RawURLEncoding.EncodeToString(func() []byte { s := sha256.Sum256([]byte("\x00")); return s[:] }())
	return map[string]string{
		"plain":                   "idempotency:tenant-1:order-7",
		"spaces and unicode":      "idempotency:tenant 1:Bestellung-Müller-注文-🎉",
		"glob and brace bytes":    "idempotency:{t}:*?[a]",
		"512 bytes":               long,
		"513 bytes":               long + "k",
		"1024 bytes":              strings.Repeat("x", store.MaxKeyBytes),
		"512 bytes then hashed":   long[:511] + "\x00",
		"a NUL":                   "\x00",
		"control bytes":           "a\r\nb\x1b[31m",
		"DEL":                     "a\x7fb",
		"a C1 control":            "a\u0085b",
		"invalid UTF-8":           "a\xff\xfeb",
		"leading @":               "@k",
		"the hashed form of NUL":  collide,
		"the hashed form without": collide[1:],
		"U+FFFD itself":           "a\uFFFDb",
	}
}

// TestKeys: record keys of any bytes each get a record of their own, under
// the Redis key the documentation promises: verbatim when readable and at
// most 512 bytes, else "@sha256:" and the base64url SHA-256; a verbatim
// key never starts with '@', so the two forms never meet (even a key that
// spells another key's hashed form).
func TestRecordKeysVerbatimOrHashed(t *testing.T) {
	verbatim := map[string]bool{
		"plain": true, "spaces and unicode": true, "glob and brace bytes": true, "512 bytes": true,
		"the hashed form without": true, "U+FFFD itself": true,
	}
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			c := b.newClient(t)
			s := newStore(t, c)
			p := prefix(t)
			seen := map[string]string{}
			for name, k := range keyCases() {
				rk := redisstore.RedisKey(s, k)
				sum := sha256.Sum256([]byte(k))
				want := p + "@sha256:" + base64.RawURLEncoding.EncodeToString(sum[:])
				if verbatim[name] {
					want = p + k
				}
				if rk != want {
					t.Errorf("%s: Redis key %q; want %q", name, rk, want)
				}
				if other, dup := seen[rk]; dup {
					t.Errorf("%s and %s share the Redis key %q", name, other, rk)
				}
				seen[rk] = name
				rec, claimed, err := s.Claim(ctx, k, "fp:"+name, time.Minute)
				if err != nil || !claimed {
					t.Fatalf("%s: Claim = %v, %v", name, claimed, err)
				}
				done := rec
				done.State, done.Response = store.StateCompleted, []byte(name)
				if ok, err := s.Complete(ctx, done, time.Minute); err != nil || !ok {
					t.Fatalf("%s: Complete = %v, %v", name, ok, err)
				}
				if n, err := c.Exists(ctx, rk).Result(); err != nil || n != 1 {
					t.Fatalf("%s: the record is not at its Redis key: %v, %v", name, n, err)
				}
			}
			for name, k := range keyCases() {
				rec, ok, err := s.Get(ctx, k)
				if err != nil || !ok || rec.Key != k || string(rec.Response) != name || rec.Fingerprint != "fp:"+name {
					t.Errorf("%s: Get = %+v, %v, %v; want its own record", name, rec, ok, err)
				}
			}
		})
	}
}

// TestRecordLayout: the string an operator sees for each kind of record,
// and its expiry (never before its fence + 1 ms + the largest clock step,
// the fence rule of store.Store): a claim's fence is its key's expiry less
// the keep its value names.
func TestRecordLayout(t *testing.T) {
	ctx := t.Context()
	c := nodeClient(t, testenv.Redis(t).Addr)
	s := newStore(t, c)
	k := "idempotency:tenant:order-1"
	rk := prefix(t) + k
	claim, claimed, err := s.Claim(ctx, k, "fp", 10*time.Second)
	if err != nil || !claimed {
		t.Fatal(claimed, err)
	}
	keep := 10*time.Second + store.ClaimRetention
	v := c.Get(ctx, rk).Val()
	want := fmt.Sprintf("c%d:%d:0:", (10 * time.Second).Milliseconds(), keep.Milliseconds())
	if !strings.HasPrefix(v, want) || !strings.HasSuffix(v, ":2:fp") || strings.Count(v, ":") != 5 {
		t.Fatalf("the claim's value: %q; want %q, a token and the fingerprint with its length", v, want)
	}
	// A claim is kept for its lease plus the claim retention, from its fence.
	if at := c.PExpireTime(ctx, rk).Val(); at != time.Duration(int64(claim.Fence))*time.Millisecond+keep {
		t.Fatalf("a claim expires at %v; want its fence plus %v", at, keep)
	}
	if !claim.CreatedAt.Equal(time.UnixMilli(int64(claim.Fence))) || !claim.ExpiresAt.Equal(claim.CreatedAt.Add(10*time.Second)) {
		t.Fatalf("the claim %+v: want created at its fence, expiring 10s later", claim)
	}
	done := claim
	done.State, done.Response = store.StateCompleted, []byte("receipt")
	if ok, err := s.Complete(ctx, done, time.Hour); err != nil || !ok {
		t.Fatal(ok, err)
	}
	out, _, err := s.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	v = c.Get(ctx, rk).Val()
	if want := fmt.Sprintf("o%d:%d:%d:2:fpreceipt", uint64(claim.Fence), out.CreatedAt.UnixMilli(), out.ExpiresAt.UnixMilli()); v != want {
		t.Fatalf("the outcome's value: %q; want %q", v, want)
	}
	if at := c.PExpireTime(ctx, rk).Val(); at != time.Duration(out.ExpiresAt.UnixMilli())*time.Millisecond {
		t.Fatalf("an outcome expires at %v; want its expiry %v", at, out.ExpiresAt.UnixMilli())
	}
	// A deleted record stays as a tombstone (its fence only) until the
	// server's clock passes its fence plus the largest clock step.
	if ok, err := s.Delete(ctx, k); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if v := c.Get(ctx, rk).Val(); v != fmt.Sprintf("d%d", uint64(claim.Fence)) {
		t.Fatalf("the tombstone: %q", v)
	}
	floor := leased.FenceFloor(claim.Fence, leased.DefaultMaxClockStep)
	if at := c.PExpireTime(ctx, rk).Val(); at != time.Duration(floor.UnixMilli())*time.Millisecond {
		t.Fatalf("a tombstone expires at %v; want its fence + 1 ms + the clock step (%v)", at, floor.UnixMilli())
	}
	// With a step of 0, a deleted record whose fence the clock has passed
	// goes at once. (The claim and the delete may fall within the fence's
	// millisecond: wait for the server's clock to pass it.)
	s0 := newStore(t, c, redisstore.WithMaxClockStep(0))
	claim, claimed, err = s0.Claim(ctx, k, "fp", 10*time.Second)
	if err != nil || !claimed {
		t.Fatal(claimed, err)
	}
	for {
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if uint64(now.UnixMilli()) > uint64(claim.Fence) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if ok, err := s0.Delete(ctx, k); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if n := c.Exists(ctx, rk).Val(); n != 0 {
		t.Fatalf("a deleted record whose fence the clock has passed, with no clock step, is still there: %q", c.Get(ctx, rk).Val())
	}
	// A released claim becomes a tombstone in one write: it keeps its key's
	// expiry (its lease plus the retention, past its fence plus the step).
	claim, claimed, err = s.Claim(ctx, k, "fp", 10*time.Second)
	if err != nil || !claimed {
		t.Fatal(claimed, err)
	}
	if ok, err := s.Release(ctx, k, claim.Fence); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if v := c.Get(ctx, rk).Val(); v != fmt.Sprintf("r%d", uint64(claim.Fence)) {
		t.Fatalf("the released claim: %q", v)
	}
	until := claim.ExpiresAt.Add(store.ClaimRetention)
	if at := c.PExpireTime(ctx, rk).Val(); at != time.Duration(until.UnixMilli())*time.Millisecond {
		t.Fatalf("a released claim expires at %v; want its claim's expiry, %v", at, until.UnixMilli())
	}
	// A claim over a tombstone takes the fence above it, written by the
	// claim script, whose times are relative to that fence too.
	next, claimed, err := s.Claim(ctx, k, "fp2", time.Second)
	if err != nil || !claimed || next.Fence <= claim.Fence {
		t.Fatalf("a claim over a released claim: %+v, %v, %v; want a fence above %d", next, claimed, err, claim.Fence)
	}
	if got, ok, err := s.Get(ctx, k); err != nil || !ok || got.Fence != next.Fence || !got.ExpiresAt.Equal(next.ExpiresAt) || !got.CreatedAt.Equal(next.CreatedAt) {
		t.Fatalf("Get after a claim over a tombstone: %+v, %v, %v; want %+v", got, ok, err, next)
	}
	ahead := uint64(time.Now().Add(time.Hour).UnixMilli())
	if ok, err := s.Put(ctx, store.Record{Key: k, State: store.StateCompleted, Fence: idemkit.Fence(ahead), Response: []byte("x")}, time.Minute); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if ok, err := s.Delete(ctx, k); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if v := c.Get(ctx, rk).Val(); v != fmt.Sprintf("d%d", ahead) {
		t.Fatalf("the tombstone: %q", v)
	}
	if d := c.PTTL(ctx, rk).Val(); d < 60*time.Minute || d > time.Hour+time.Minute+time.Second {
		t.Fatalf("a tombstone's PTTL is %v; want until its fence and the clock step", d)
	}
	if _, ok, _ := s.Get(ctx, k); ok {
		t.Fatal("Get sees a tombstone")
	}
	next, claimed, err = s.Claim(ctx, k, "fp", time.Second)
	if err != nil || !claimed || uint64(next.Fence) != ahead+1 {
		t.Fatalf("a claim over a tombstone: %+v, %v, %v; want fence %d", next, claimed, err, ahead+1)
	}
	// Its lease runs from the server's clock, not from its fence an hour
	// ahead: it expires a second from now.
	if d := time.Until(next.ExpiresAt); d > 2*time.Second || d < -time.Second {
		t.Fatalf("a claim whose fence is ahead of the clock expires in %v; want about a second", d)
	}
}

// TestNoKeyWithoutExpiry runs random operations on a few keys, on a single
// node and a cluster, and then checks that every key the store left has an
// expiry.
func TestNoKeyWithoutExpiry(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			c := b.newClient(t)
			s := newStore(t, c)
			rng := rand.New(rand.NewPCG(1, 2))
			keys := []string{"a", "b", "c", "d", "@e", strings.Repeat("f", 600), "g\x00"}
			fences := map[string]idemkit.Fence{}
			for range 2000 {
				k := keys[rng.IntN(len(keys))]
				ttl := time.Duration(1+rng.IntN(30)) * time.Millisecond
				var err error
				switch rng.IntN(7) {
				case 0, 1:
					var rec store.Record
					var claimed bool
					rec, claimed, err = s.Claim(ctx, k, "fp", ttl)
					if claimed {
						fences[k] = rec.Fence
					}
				case 2:
					_, _, err = s.Extend(ctx, k, fences[k]+idemkit.Fence(rng.IntN(2)), ttl)
				case 3:
					_, err = s.Complete(ctx, store.Record{Key: k, State: store.State(2 + rng.IntN(2)), Fence: fences[k], Response: []byte("r")}, ttl)
				case 4:
					_, err = s.Release(ctx, k, fences[k]+idemkit.Fence(rng.IntN(2)))
				case 5:
					_, err = s.Delete(ctx, k)
				case 6:
					_, err = s.Put(ctx, store.Record{Key: k, State: store.StateCompleted, Fence: fences[k] + idemkit.Fence(rng.IntN(3)) - 1}, ttl)
				}
				if err != nil && idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
					t.Fatal(err)
				}
			}
			left, err := immortal(ctx, c, prefix(t))
			if err != nil {
				t.Fatal(err)
			}
			if len(left) > 0 {
				t.Fatalf("keys without expiry: %q", left)
			}
		})
	}
}

// TestOutOfMemory: a Redis over its maxmemory (noeviction) refuses new
// claims and outcomes with RateLimited and a message that says so, while
// replays, busy answers, extensions and releases go on.
func TestOutOfMemory(t *testing.T) {
	ctx := t.Context()
	srv := testenv.NewRedis(t)
	c := nodeClient(t, srv.Addr)
	s := newStore(t, c)
	held, _, err := s.Claim(ctx, "held", "fp", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	done, _, err := s.Claim(ctx, "done", "fp", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	done.State, done.Response = store.StateCompleted, []byte("receipt")
	if ok, err := s.Complete(ctx, done, time.Hour); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer c.ConfigSet(context.Background(), "maxmemory", "0")

	_, _, err = s.Claim(ctx, "fresh", "fp", time.Minute)
	var rerr redis.Error
	if idemkit.CodeOf(err) != idemkit.CodeRateLimited || !errors.Is(err, idemkit.ErrRateLimited) || !errors.As(err, &rerr) ||
		!strings.Contains(err.Error(), "out of memory") || strings.Contains(err.Error(), "fresh") {
		t.Fatalf("a claim on an out-of-memory Redis: %v; want RateLimited saying the server is out of memory, without the key", err)
	}
	t.Logf("the error: %v", err)
	if _, ok, err := s.Get(ctx, "fresh"); err != nil || ok {
		t.Fatalf("the refused claim left something: %v, %v", ok, err)
	}
	if rec, claimed, err := s.Claim(ctx, "done", "fp", time.Minute); err != nil || claimed || string(rec.Response) != "receipt" {
		t.Fatalf("a replay on an out-of-memory Redis: %+v, %v, %v", rec, claimed, err)
	}
	if _, claimed, err := s.Claim(ctx, "held", "fp", time.Minute); err != nil || claimed {
		t.Fatalf("a busy claim on an out-of-memory Redis: %v, %v", claimed, err)
	}
	if _, ok, err := s.Extend(ctx, "held", held.Fence, time.Minute); err != nil || !ok {
		t.Fatalf("an extension on an out-of-memory Redis: %v, %v", ok, err)
	}
	out := held
	out.State, out.Response = store.StateCompleted, []byte("r")
	if _, err := s.Complete(ctx, out, time.Hour); idemkit.CodeOf(err) != idemkit.CodeRateLimited {
		t.Fatalf("a completion on an out-of-memory Redis: %v; want RateLimited", err)
	}
	if ok, err := s.Release(ctx, "held", held.Fence); err != nil || !ok {
		t.Fatalf("a release on an out-of-memory Redis: %v, %v", ok, err)
	}
	if ok, err := s.Delete(ctx, "done"); err != nil || !ok {
		t.Fatalf("a deletion on an out-of-memory Redis: %v, %v", ok, err)
	}
}

// TestStalledServer: calls on a frozen server (SIGSTOP) end with
// NetworkTimeout at the ctx deadline, not after go-redis's read timeouts
// and retries; once it resumes, the store works again.
func TestStalledServer(t *testing.T) {
	srv := testenv.NewRedis(t)
	c := nodeClient(t, srv.Addr)
	s := newStore(t, c)
	if _, _, err := s.Claim(t.Context(), "k", "fp", time.Minute); err != nil {
		t.Fatal(err)
	}
	resume := srv.Stall(t)
	for _, op := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"claim", func(ctx context.Context) error { _, _, err := s.Claim(ctx, "k2", "fp", time.Minute); return err }},
		{"get", func(ctx context.Context) error { _, _, err := s.Get(ctx, "k"); return err }},
		{"extend", func(ctx context.Context) error { _, _, err := s.Extend(ctx, "k", 1, time.Minute); return err }},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		start := time.Now()
		err := op.call(ctx)
		cancel()
		if took := time.Since(start); took > 300*time.Millisecond+2*time.Second {
			t.Errorf("%s on a stalled server took %v", op.name, took)
		}
		if code := idemkit.CodeOf(err); code != idemkit.CodeNetworkTimeout {
			t.Errorf("%s on a stalled server: %v; want NetworkTimeout", op.name, err)
		}
	}
	resume()
	if _, ok, err := s.Get(t.Context(), "k"); err != nil || !ok {
		t.Fatalf("after the stall: %v, %v", ok, err)
	}
}

// TestClosedClient: a closed client is ServiceUnavailable.
func TestClosedClient(t *testing.T) {
	c := nodeClient(t, testenv.Redis(t).Addr)
	s := newStore(t, c)
	_ = c.Close()
	if _, _, err := s.Claim(t.Context(), "k", "fp", time.Second); idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable {
		t.Fatalf("a claim on a closed client: %v; want ServiceUnavailable", err)
	}
}

// TestWrongType: a key of the store's holding something else (another
// program writing under the prefix) is Internal, and says so: another type
// names WRONGTYPE, a string that is no record says it is malformed.
func TestWrongType(t *testing.T) {
	ctx := t.Context()
	c := nodeClient(t, testenv.Redis(t).Addr)
	s := newStore(t, c)
	if err := c.HSet(ctx, prefix(t)+"h", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.Claim(ctx, "h", "fp", time.Second)
	if idemkit.CodeOf(err) != idemkit.CodeInternal || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("a claim over a hash: %v; want Internal naming WRONGTYPE", err)
	}
	if err := c.Set(ctx, prefix(t)+"k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"claim": func() error { _, _, err := s.Claim(ctx, "k", "fp", time.Second); return err },
		"get":   func() error { _, _, err := s.Get(ctx, "k"); return err },
		"complete": func() error {
			_, err := s.Complete(ctx, store.Record{Key: "k", Fence: 1, State: store.StateCompleted}, time.Second)
			return err
		},
	} {
		if err := call(); idemkit.CodeOf(err) != idemkit.CodeInternal || !strings.Contains(err.Error(), "malformed") {
			t.Errorf("a %s over a string that is no record: %v; want Internal saying it is malformed", name, err)
		}
	}
	if v := c.Get(ctx, prefix(t)+"k").Val(); v != "v" {
		t.Fatalf("the key was changed to %q", v)
	}
}

// TestClaimRetriedAfterLostReply: the connection breaks after the server
// ran a claim and before its reply arrived; go-redis sends the claim again
// on a new connection, and the store gets its own claim back (not "busy").
// The same for a completion: its retry finds its own outcome and reports
// it written.
func TestClaimRetriedAfterLostReply(t *testing.T) {
	ctx := t.Context()
	l := newLink(t, testenv.Redis(t).Addr)
	c := nodeClient(t, l.addr())
	s := newStore(t, c)
	l.dropReplyTo("pexpiretime")
	rec, claimed, err := s.Claim(ctx, "k", "fp", time.Minute)
	if l.dropped.Load() != 1 {
		t.Fatalf("the reply was not lost (%d)", l.dropped.Load())
	}
	if err != nil || !claimed {
		t.Fatalf("a claim whose first reply was lost: %+v, %v, %v; want claimed", rec, claimed, err)
	}
	rec.State, rec.Response = store.StateCompleted, []byte("receipt")
	l.dropReplyTo(redisstore.ScriptSHA("complete"))
	if ok, err := s.Complete(ctx, rec, time.Minute); err != nil || !ok || l.dropped.Load() != 2 {
		t.Fatalf("a completion whose first reply was lost: %v, %v (lost %d)", ok, err, l.dropped.Load())
	}
	got, ok, err := s.Get(ctx, "k")
	if err != nil || !ok || !bytes.Equal(got.Response, rec.Response) || got.Fence != rec.Fence {
		t.Fatalf("Get: %+v, %v, %v", got, ok, err)
	}
	other := rec
	other.Response = []byte("another")
	if ok, err := s.Complete(ctx, other, time.Minute); err != nil || ok {
		t.Fatalf("another outcome over the written one: %v, %v; want refused", ok, err)
	}
}

// TestClaimAfterOwnReleaseTakesOneRoundTrip claims, releases and claims
// again one key through one store: the key then holds the release's
// tombstone, and the store that released it claims it by the claim script
// at once (one round trip), where another store finds the tombstone by the
// transaction first (two). Both claims get a greater fence.
func TestClaimAfterOwnReleaseTakesOneRoundTrip(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			claim := func(s *redisstore.Store, n *counter, key string) (store.Record, int) {
				t.Helper()
				before := n.count()
				rec, claimed, err := s.Claim(ctx, key, fp.String(), time.Minute)
				if err != nil || !claimed {
					t.Fatalf("claim of %s: %v, %v", key, claimed, err)
				}
				return rec, n.count() - before
			}
			release := func(s *redisstore.Store, rec store.Record) {
				t.Helper()
				if ok, err := s.Release(ctx, rec.Key, rec.Fence); err != nil || !ok {
					t.Fatalf("release: %v, %v", ok, err)
				}
			}
			var mine, theirs counter
			c1, c2 := b.newClient(t), b.newClient(t)
			s1, s2 := newStore(t, c1), newStore(t, c2)
			c1.AddHook(&mine)
			c2.AddHook(&theirs)

			first, _ := claim(s1, &mine, "job")
			release(s1, first)
			again, trips := claim(s1, &mine, "job")
			if trips != 1 || again.Fence <= first.Fence {
				t.Fatalf("the releasing store's next claim: %d round trips, fence %v after %v; want 1 and greater", trips, again.Fence, first.Fence)
			}
			release(s1, again)
			other, trips := claim(s2, &theirs, "job")
			if trips != 2 || other.Fence <= again.Fence {
				t.Fatalf("another store's claim of the released key: %d round trips, fence %v after %v; want 2 and greater", trips, other.Fence, again.Fence)
			}
		})
	}
}
