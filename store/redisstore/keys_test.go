package redisstore_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// keyStore is a store for key encoding only: it does no I/O.
func keyStore(t testing.TB) *redisstore.Store {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redisstore.New(c, redisstore.WithKeyPrefix("p:"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// FuzzRedisKeys: a record key is kept verbatim exactly when it is readable
// (at most 512 bytes of valid UTF-8 without control characters, not
// starting with '@'), else it is hashed under the '@' marker; two distinct
// record keys never share a Redis key.
func FuzzRedisKeys(f *testing.F) {
	for _, k := range keyCases() {
		f.Add(k, k+"x")
	}
	f.Add("@sha256:abc", "abc")
	s := keyStore(f)
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, k := range []string{a, b} {
			if k == "" {
				continue
			}
			rk := redisstore.RedisKey(s, k)
			readable := len(k) <= 512 && utf8.ValidString(k) && k[0] != '@' &&
				strings.IndexFunc(k, unicode.IsControl) < 0
			switch {
			case readable && rk != "p:"+k:
				t.Fatalf("a readable key %q is stored as %q", k, rk)
			case !readable && (!strings.HasPrefix(rk, "p:@sha256:") || len(rk) != len("p:@sha256:")+43):
				t.Fatalf("the key %q is stored as %q; want its hash", k, rk)
			}
		}
		if a != "" && b != "" && a != b && redisstore.RedisKey(s, a) == redisstore.RedisKey(s, b) {
			t.Fatalf("%q and %q share the Redis key %q", a, b, redisstore.RedisKey(s, a))
		}
	})
}
