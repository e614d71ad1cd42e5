package provider_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idemkit/lock/provider"
)

func TestStorageKey(t *testing.T) {
	if got := provider.StorageKey("orders:42", 0, nil); got != "k:orders:42" {
		t.Fatalf("verbatim form %q", got)
	}
	long := strings.Repeat("x", 512)
	if got := provider.StorageKey(long, 100, nil); !strings.HasPrefix(got, provider.HashedPrefix) || len(got) != 45 {
		t.Fatalf("hashed form %q (%d bytes)", got, len(got))
	}
	noSlash := func(s string) bool { return !strings.Contains(s, "/") }
	if got := provider.StorageKey("a/b", 0, noSlash); !strings.HasPrefix(got, provider.HashedPrefix) || strings.Contains(got, "/") {
		t.Fatalf("a key the backend cannot store verbatim came out as %q", got)
	}
	// The hashed form depends on the key only.
	if provider.StorageKey(long, 100, nil) != provider.StorageKey(long, 60, noSlash) {
		t.Fatal("the hashed form depends on the budget")
	}
	// A key that spells a hashed name stays distinct from it.
	h := provider.StorageKey(long, 100, nil)
	if provider.StorageKey(h, 0, nil) == h {
		t.Fatal("a verbatim key collides with a hashed name")
	}
	// Budgets below the hashed size are raised to it.
	if got := provider.StorageKey("k", 1, nil); got != "k:k" {
		t.Fatalf("budget 1, short key: %q", got)
	}
	if got := provider.StorageKey(strings.Repeat("k", 50), 1, nil); len(got) != 45 {
		t.Fatalf("budget 1, long key: %q", got)
	}
	if got := provider.StorageKey(strings.Repeat("y", 43), 45, nil); got != "k:"+strings.Repeat("y", 43) {
		t.Fatalf("a key that fits the budget exactly was hashed: %q", got)
	}
}

// FuzzStorageKey checks that storage names of two different keys never
// collide, that they always carry one of the two form prefixes, that they
// respect the budget and the backend's verbatim predicate.
func FuzzStorageKey(f *testing.F) {
	f.Add("a", "b", 64)
	f.Add("k:a", "a", 0)
	f.Add("h:x", strings.Repeat("z", 600), 100)
	f.Add("a/b", "a\x00b", 30)
	f.Fuzz(func(t *testing.T, a, b string, budget int) {
		budget = budget % 2048
		if budget < 0 {
			budget = -budget
		}
		valid := func(s string) bool { return utf8.ValidString(s) && !strings.ContainsAny(s, "/\x00") }
		sa, sb := provider.StorageKey(a, budget, valid), provider.StorageKey(b, budget, valid)
		if a != b && sa == sb {
			t.Fatalf("keys %q and %q share the storage name %q", a, b, sa)
		}
		for _, s := range []string{sa, sb} {
			if !strings.HasPrefix(s, provider.VerbatimPrefix) && !strings.HasPrefix(s, provider.HashedPrefix) {
				t.Fatalf("storage name %q has no form prefix", s)
			}
			if budget > 0 && len(s) > max(budget, 45) {
				t.Fatalf("storage name of %d bytes exceeds the budget %d", len(s), budget)
			}
			if strings.HasPrefix(s, provider.VerbatimPrefix) && !valid(s[len(provider.VerbatimPrefix):]) {
				t.Fatalf("a key the backend cannot store came out verbatim: %q", s)
			}
		}
	})
}
