package redislock_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/idemkit/idemkit/lock/redislock/redistest"
	"github.com/redis/go-redis/v9"
)

func TestNewLayoutValidatesPrefix(t *testing.T) {
	for _, c := range []struct {
		prefix string
		ok     bool
	}{
		{"idemkit", true}, {"a", true}, {"app:v2", true}, {"a::b", true}, {strings.Repeat("p", 64), true},
		{"", false}, {strings.Repeat("p", 65), false}, {"a{b", false}, {"a}b", false}, {"a b", false},
		{"tab\t", false}, {"caf\u00e9", false}, {"nul\x00", false},
	} {
		_, err := redislock.NewLayout(c.prefix)
		if (err == nil) != c.ok {
			t.Errorf("NewLayout(%q) = %v; want ok = %v", c.prefix, err, c.ok)
		}
		if err != nil && idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Errorf("NewLayout(%q): code %v; want InvalidArgument", c.prefix, idemkit.CodeOf(err))
		}
		_, err = redislock.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), redislock.WithKeyPrefix(c.prefix))
		if (err == nil) != c.ok {
			t.Errorf("New with prefix %q = %v; want ok = %v", c.prefix, err, c.ok)
		}
	}
}

func TestHashTag(t *testing.T) {
	for _, c := range []struct {
		key, tag string
		ok       bool
	}{
		{"{a}", "a", true},
		{"x{user1000}.following", "user1000", true},
		{"ns:lock:{k:abc}", "k:abc", true},
		{"{a}{b}", "a", true},
		{"a}{b}", "b", true},
		{"{{a}", "{a", true},
		{"{a{b}c}", "a{b", true},
		{"{}", "", false},
		{"{}{a}", "", false}, // Redis stops at the first '{': an empty tag means the whole key
		{"{a", "", false},
		{"a}", "", false},
		{"plain", "", false},
		{"", "", false},
	} {
		tag, ok := redislock.HashTag(c.key)
		if tag != c.tag || ok != c.ok {
			t.Errorf("HashTag(%q) = %q, %v; want %q, %v", c.key, tag, ok, c.tag, c.ok)
		}
	}
}

// TestHashTagAgreesWithRedis asks a cluster node for the slot of keys and
// of what HashTag says Redis hashes; and checks that every name of a key
// lands on the slot of its tag, and the guard's lock and record on one.
func TestHashTagAgreesWithRedis(t *testing.T) {
	c := redistest.Cluster(t).(*redis.ClusterClient)
	ctx := t.Context()
	slot := func(k string) int64 {
		t.Helper()
		s, err := c.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		return s
	}
	keys := []string{"{a}", "x{user1000}.following", "{a}{b}", "a}{b}", "{{a}", "{a{b}c}", "{}", "{}{a}", "{a", "a}", "plain",
		"\xff{\x00}", "k:{x}", "caf\u00e9{caf\u00e9}", "ns:lock:{h:" + strings.Repeat("Z", 43) + "}"}
	for _, k := range keys {
		hashed := k
		if tag, ok := redislock.HashTag(k); ok {
			hashed = tag
		}
		if slot(k) != slot(hashed) {
			t.Errorf("key %q: Redis hashes it to slot %d, but HashTag's part %q to %d", k, slot(k), hashed, slot(hashed))
		}
	}
	layout, err := redislock.NewLayout("app")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append(keys, "ordinary", "a/b", "\x00") {
		want := slot("{" + redislock.Tag(k) + "}")
		for _, name := range []string{layout.Lock(k), layout.Fence(k), layout.Record(k)} {
			if got := slot(name); got != want {
				t.Errorf("key %q: name %q is on slot %d; want its tag's slot %d", k, name, got, want)
			}
		}
	}
	for _, base := range []string{"k:order-1", "h:" + strings.Repeat("A", 43)} {
		lockName := layout.Lock("idempotency:lock:{" + base + "}")
		recordName := layout.Record("idempotency:record:{" + base + "}")
		if slot(lockName) != slot(recordName) {
			t.Errorf("the guard's lock %q and record %q are on different slots", lockName, recordName)
		}
	}
	id := lock.NewID()
	if slot(layout.Index(id)) != slot(id) {
		t.Errorf("the index of %q is not on the id's own slot", id)
	}
}

// TestNamesAreInjective: distinct keys, kinds and prefixes never share a
// name, whatever the keys look like.
func TestNamesAreInjective(t *testing.T) {
	keys := []string{"a", "b", "a:b", "a:{b}", "{a}:b", "k:a", "h:a", "l:a", "f:a", "r:a", "i", ":i", "}:i", "{x}:i",
		lock.StorageKey("a", 0, nil), "k:" + lock.StorageKey("a", 1, nil), "a\x00", "\x00a", "\xff", "{a}", "{{a}",
		"{a}}", "a{", "a}", " ", "caf\u00e9", strings.Repeat("k", 512)}
	ids := []string{lock.NewID(), lock.NewID(), "AAAAAAAAAAAAAAAAAAAAAA"}
	unique := make(map[string]bool)
	for _, k := range keys {
		unique[k] = true
	}
	seen := make(map[string]string)
	add := func(name, what string) {
		if prev, dup := seen[name]; dup {
			t.Fatalf("%s and %s share the name %q", prev, what, name)
		}
		seen[name] = what
	}
	for _, prefix := range []string{"p", "p:p", "p:", "pp"} {
		layout, err := redislock.NewLayout(prefix)
		if err != nil {
			t.Fatal(err)
		}
		for k := range unique {
			add(layout.Lock(k), fmt.Sprintf("lock(%s, %q)", prefix, k))
			add(layout.Fence(k), fmt.Sprintf("fence(%s, %q)", prefix, k))
			add(layout.Record(k), fmt.Sprintf("record(%s, %q)", prefix, k))
		}
		for _, id := range ids {
			add(layout.Index(id), fmt.Sprintf("index(%s, %q)", prefix, id))
		}
	}
}
