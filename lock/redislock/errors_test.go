package redislock_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/redis/go-redis/v9"
)

const secretKey = "secret-key-7f3a"

// serverReply makes a real server answer with the error reply msg, through
// a script, so go-redis parses it as it would the server's own.
func serverReply(msg string) func(t *testing.T) error {
	return func(t *testing.T) error {
		c := noRetry(t, &redis.Options{Addr: testenv.Redis(t).Addr})
		return c.Eval(t.Context(), "return redis.error_reply(ARGV[1])", nil, msg).Err()
	}
}

// TestMapError maps real go-redis errors, most of them provoked on real
// servers, to codes.
func TestMapError(t *testing.T) {
	cases := []struct {
		name string
		err  func(t *testing.T) error
		want idemkit.Code
	}{
		{"context canceled", func(t *testing.T) error {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return clientFor(t, testenv.Redis(t).Addr).Get(ctx, secretKey).Err()
		}, idemkit.CodeAborted},
		{"context deadline", func(t *testing.T) error {
			ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
			defer cancel()
			return clientFor(t, testenv.Redis(t).Addr).Get(ctx, secretKey).Err()
		}, idemkit.CodeNetworkTimeout},
		{"read timeout (server paused)", func(t *testing.T) error {
			srv := testenv.NewRedis(t)
			admin := clientFor(t, srv.Addr)
			c := noRetry(t, &redis.Options{Addr: srv.Addr, ReadTimeout: 50 * time.Millisecond})
			if err := c.Ping(t.Context()).Err(); err != nil { // connect before the pause
				t.Fatal(err)
			}
			// The server is dedicated and killed when the test ends: no
			// unpause (it would wait out the pause itself).
			if err := admin.ClientPause(t.Context(), time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			return c.Get(t.Context(), secretKey).Err()
		}, idemkit.CodeNetworkTimeout},
		{"closed client", func(t *testing.T) error {
			c := clientFor(t, testenv.Redis(t).Addr)
			_ = c.Close()
			return c.Get(t.Context(), secretKey).Err()
		}, idemkit.CodeServiceUnavailable},
		{"pool timeout (every connection taken)", func(t *testing.T) error {
			c := noRetry(t, &redis.Options{Addr: testenv.Redis(t).Addr, PoolSize: 1, PoolTimeout: 50 * time.Millisecond})
			held := c.Conn()
			defer held.Close()
			if err := held.Ping(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			return c.Get(t.Context(), secretKey).Err()
		}, idemkit.CodeServiceUnavailable},
		{"connection refused", func(t *testing.T) error {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			_ = ln.Close()
			return noRetry(t, &redis.Options{Addr: addr}).Get(t.Context(), secretKey).Err()
		}, idemkit.CodeServiceUnavailable},
		{"server killed", func(t *testing.T) error {
			srv := testenv.NewRedis(t)
			c := noRetry(t, &redis.Options{Addr: srv.Addr})
			if err := c.Ping(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			srv.Stop(t)
			return c.Get(t.Context(), secretKey).Err()
		}, idemkit.CodeServiceUnavailable},
		{"WRONGTYPE", func(t *testing.T) error {
			c := clientFor(t, testenv.Redis(t).Addr)
			k := testenv.Name(t) + secretKey
			if err := c.Set(t.Context(), k, "string", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			return c.HGet(t.Context(), k, "f").Err()
		}, idemkit.CodeInternal},
		{"NOSCRIPT", func(t *testing.T) error {
			return clientFor(t, testenv.Redis(t).Addr).EvalSha(t.Context(), strings.Repeat("0", 40), []string{secretKey}).Err()
		}, idemkit.CodeInternal},
		{"script runtime error", func(t *testing.T) error {
			return clientFor(t, testenv.Redis(t).Addr).Eval(t.Context(), "return nil + 1", []string{secretKey}).Err()
		}, idemkit.CodeInternal},
		{"READONLY (a replica)", func(t *testing.T) error {
			primary, replica := testenv.NewRedis(t), testenv.NewRedis(t)
			host, port, _ := net.SplitHostPort(primary.Addr)
			c := noRetry(t, &redis.Options{Addr: replica.Addr})
			if err := c.SlaveOf(t.Context(), host, port).Err(); err != nil {
				t.Fatal(err)
			}
			return c.Set(t.Context(), secretKey, "v", 0).Err()
		}, idemkit.CodeServiceUnavailable},
		{"MOVED (a cluster node asked for another's key)", func(t *testing.T) error {
			// Two of the three masters do not own the key's slot.
			for _, addr := range testenv.RedisCluster(t).Addrs {
				err := noRetry(t, &redis.Options{Addr: addr}).Get(t.Context(), secretKey).Err()
				if _, moved := redis.IsMovedError(err); moved {
					return err
				}
			}
			t.Fatal("no node answered MOVED")
			return nil
		}, idemkit.CodeServiceUnavailable},
		{"CROSSSLOT", func(t *testing.T) error {
			c := noRetry(t, &redis.Options{Addr: testenv.RedisCluster(t).Addrs[0]})
			return c.MGet(t.Context(), "{a}"+secretKey, "{c}"+secretKey).Err()
		}, idemkit.CodeInternal},
		{"NOAUTH", func(t *testing.T) error {
			srv := authServer(t)
			return noRetry(t, &redis.Options{Addr: srv.Addr}).Get(t.Context(), secretKey).Err()
		}, idemkit.CodeAuthFailed},
		{"WRONGPASS", func(t *testing.T) error {
			srv := authServer(t)
			return noRetry(t, &redis.Options{Addr: srv.Addr, Password: "wrong"}).Get(t.Context(), secretKey).Err()
		}, idemkit.CodeAuthFailed},
		{"NOPERM", func(t *testing.T) error {
			srv := authServer(t)
			return noRetry(t, &redis.Options{Addr: srv.Addr, Username: "reader", Password: "reader-pw"}).Set(t.Context(), secretKey, "v", 0).Err()
		}, idemkit.CodeAuthFailed},
		{"OOM", func(t *testing.T) error {
			srv := testenv.NewRedis(t)
			c := noRetry(t, &redis.Options{Addr: srv.Addr})
			if err := c.ConfigSet(t.Context(), "maxmemory-policy", "noeviction").Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.ConfigSet(t.Context(), "maxmemory", "1").Err(); err != nil {
				t.Fatal(err)
			}
			return c.Set(t.Context(), secretKey, "v", 0).Err()
		}, idemkit.CodeRateLimited},
		{"BUSY (a script holds the server)", busyError, idemkit.CodeServiceUnavailable},
		{"LOADING reply", serverReply("LOADING Redis is loading the dataset in memory"), idemkit.CodeServiceUnavailable},
		{"MASTERDOWN reply", serverReply("MASTERDOWN Link with MASTER is down"), idemkit.CodeServiceUnavailable},
		{"CLUSTERDOWN reply", serverReply("CLUSTERDOWN The cluster is down"), idemkit.CodeServiceUnavailable},
		{"TRYAGAIN reply", serverReply("TRYAGAIN Multiple keys request during rehashing of slot"), idemkit.CodeServiceUnavailable},
		{"ASK reply", serverReply("ASK 3999 127.0.0.1:6381"), idemkit.CodeServiceUnavailable},
		{"NOREPLICAS reply", serverReply("NOREPLICAS Not enough good replicas to write."), idemkit.CodeServiceUnavailable},
		{"MISCONF reply", serverReply("MISCONF Errors writing to the AOF file"), idemkit.CodeServiceUnavailable},
		{"unknown code", serverReply("FROBNICATED something " + secretKey), idemkit.CodeInternal},
		{"no code at all", serverReply("lower case text " + secretKey), idemkit.CodeInternal},
		{"a plain Go error", func(*testing.T) error { return errors.New("boom") }, idemkit.CodeInternal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			native := c.err(t)
			if native == nil {
				t.Fatal("the scenario produced no error")
			}
			err := redislock.MapError("get", native)
			var le *idemkit.Error
			if !errors.As(err, &le) || le.Code != c.want {
				t.Fatalf("MapError(%v) = %v; want code %v", native, err, c.want)
			}
			if !errors.Is(err, c.want.Sentinel()) || !errors.Is(err, native) {
				t.Fatalf("%v does not match both its sentinel and its cause", err)
			}
			if c.want == idemkit.CodeRateLimited && strings.HasPrefix(c.name, "OOM") && !strings.Contains(le.Detail, "out of memory") {
				t.Fatalf("the OOM detail does not say the server is out of memory: %q", le.Detail)
			}
			if strings.Contains(le.Detail, "cannot be reached") && c.want != idemkit.CodeServiceUnavailable {
				t.Fatalf("a reachable server is described as unreachable: %q", le.Detail)
			}
			if strings.Contains(le.Detail, secretKey) || strings.Contains(le.Detail, "something") || strings.Contains(le.Detail, "lower case") {
				t.Fatalf("the detail quotes a key or server text: %q", le.Detail)
			}
		})
	}
}

func TestMapErrorPassesNilAndAbsence(t *testing.T) {
	c := clientFor(t, testenv.Redis(t).Addr)
	absent := c.Get(t.Context(), testenv.Name(t)).Err()
	if !errors.Is(absent, redis.Nil) {
		t.Fatalf("GET of a missing key: %v; want redis.Nil", absent)
	}
	if err := redislock.MapError("get", absent); err != nil {
		t.Fatalf("MapError(redis.Nil) = %v; want nil", err)
	}
	if err := redislock.MapError("get", nil); err != nil {
		t.Fatalf("MapError(nil) = %v", err)
	}
	coded := idemkit.NewError(idemkit.CodeInvalidArgument, "x", "y", nil)
	if err := redislock.MapError("get", coded); err != coded {
		t.Fatalf("MapError changed a *idemkit.Error: %v", err)
	}
}

// authServer is a dedicated server that requires a password and has a user
// who may only read.
func authServer(t *testing.T) *testenv.RedisServer {
	srv := testenv.NewRedis(t)
	c := clientFor(t, srv.Addr)
	ctx := t.Context()
	if err := c.Do(ctx, "ACL", "SETUSER", "reader", "on", ">reader-pw", "~*", "+get", "+hello", "+auth", "+ping").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	return srv
}

// busyError runs a script that never ends on a dedicated server, reads
// the BUSY reply other clients then get, and kills the script.
func busyError(t *testing.T) error {
	srv := testenv.NewRedis(t)
	admin := noRetry(t, &redis.Options{Addr: srv.Addr})
	if err := admin.ConfigSet(t.Context(), "busy-reply-threshold", "10").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	looper := noRetry(t, &redis.Options{Addr: srv.Addr, ReadTimeout: time.Minute})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = looper.Eval(context.Background(), "while true do end", nil).Err()
	}()
	defer wg.Wait()
	defer admin.ScriptKill(context.Background())
	guard := time.Now().Add(30 * time.Second)
	for time.Now().Before(guard) {
		err := admin.Get(t.Context(), secretKey).Err()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the server never answered BUSY")
	return nil
}
