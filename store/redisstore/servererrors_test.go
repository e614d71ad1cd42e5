package redisstore_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// refusedKey is the record key the refused claims use; no error may quote
// it.
const refusedKey = "refused-key-5c1e"

// checkRefusal fails t unless err is a server's refusal with code want,
// matching want's sentinel and a go-redis error, whose message holds every
// one of words and not the record key.
func checkRefusal(t *testing.T, err error, want idemkit.Code, words ...string) {
	t.Helper()
	var rerr redis.Error
	if idemkit.CodeOf(err) != want || !errors.Is(err, want.Sentinel()) || !errors.As(err, &rerr) {
		t.Fatalf("the claim: %v; want %v with the server's error as its cause", err, want)
	}
	msg := err.Error()
	for _, w := range words {
		if !strings.Contains(msg, w) {
			t.Fatalf("the error does not say %q: %v", w, err)
		}
	}
	if strings.Contains(msg, refusedKey) {
		t.Fatalf("the error quotes the record key: %v", err)
	}
	t.Logf("the error: %v", err)
}

// TestServerErrorReadOnly: a claim on a read-only replica is
// ServiceUnavailable saying so.
func TestServerErrorReadOnly(t *testing.T) {
	ctx := t.Context()
	primary, replica := testenv.NewRedis(t), testenv.NewRedis(t)
	host, port, err := net.SplitHostPort(primary.Addr)
	if err != nil {
		t.Fatal(err)
	}
	c := nodeClient(t, replica.Addr)
	if err := c.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, c)
	_, _, err = s.Claim(ctx, refusedKey, "fp", time.Minute)
	checkRefusal(t, err, idemkit.CodeServiceUnavailable, "read-only replica", "READONLY")
}

// TestServerErrorNoPerm: a claim by a user who may not run scripts is
// AuthFailed naming the missing permission.
func TestServerErrorNoPerm(t *testing.T) {
	ctx := t.Context()
	srv := testenv.NewRedis(t)
	admin := nodeClient(t, srv.Addr)
	if err := admin.Do(ctx, "ACL", "SETUSER", "reader", "on", ">reader-pw", "~*", "+get", "+hello", "+auth", "+ping").Err(); err != nil {
		t.Fatal(err)
	}
	if err := redisstore.LoadScript(ctx, admin); err != nil {
		t.Fatal(err)
	}
	c := nodeClient(t, srv.Addr, func(o *redis.Options) { o.Username, o.Password = "reader", "reader-pw" })
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s, err := redisstore.New(c, redisstore.WithKeyPrefix(prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Claim(ctx, refusedKey, "fp", time.Minute)
	checkRefusal(t, err, idemkit.CodeAuthFailed, "NOPERM", "may not run")
	if n, err := countKeys(ctx, admin, prefix(t)); err != nil || n != 0 {
		t.Fatalf("the refused claim left %d keys (%v)", n, err)
	}
}
