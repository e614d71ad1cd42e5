package lock_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

func TestNormalizeKey(t *testing.T) {
	cases := []struct {
		name, in, want string
		ok             bool
	}{
		{"plain", "orders:42", "orders:42", true},
		{"composed stays", "caf\u00e9", "caf\u00e9", true},
		{"decomposed composes", "cafe\u0301", "caf\u00e9", true},
		{"hangul jamo compose", "\u1100\u1161\u11a8", "\uac01", true},
		{"slashes and dots", "POST /v1/orders/../x", "POST /v1/orders/../x", true},
		{"invalid utf-8 kept", "a\xffb", "a\xffb", true},
		{"nul kept", "a\x00b", "a\x00b", true},
		{"empty", "", "", false},
		{"512 bytes", strings.Repeat("x", 512), strings.Repeat("x", 512), true},
		{"513 bytes", strings.Repeat("x", 513), "", false},
		{"600 bytes shrinking to 400", strings.Repeat("e\u0301", 200), strings.Repeat("\u00e9", 200), true},
		{"1536 bytes of jamo shrinking to 512", strings.Repeat("\u1100\u1161\u11a8", 170) + "xx", strings.Repeat("\uac01", 170) + "xx", true},
		{"huge", strings.Repeat("x", 1<<20), "", false},
	}
	for _, c := range cases {
		got, err := lock.NormalizeKey(c.in)
		if c.ok != (err == nil) || got != c.want {
			t.Fatalf("%s: NormalizeKey = %q, %v", c.name, got, err)
		}
		if err != nil {
			if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
				t.Fatalf("%s: code %v", c.name, idemkit.CodeOf(err))
			}
			if len(c.in) > 20 && strings.Contains(err.Error(), c.in[:20]) {
				t.Fatalf("%s: the error repeats the key", c.name)
			}
		}
	}
}

func TestValidateID(t *testing.T) {
	for range 100 {
		id := lock.NewID()
		if err := lock.ValidateID(id); err != nil || len(id) != lock.IDLen {
			t.Fatalf("NewID() = %q fails validation: %v", id, err)
		}
	}
	if a, b := lock.NewID(), lock.NewID(); a == b {
		t.Fatal("two ids are equal")
	}
	for _, ok := range []string{"AAAAAAAAAAAAAAAAAAAAAA", "_____________________w", "abcdefghijklmnopqrstu-"} {
		if err := lock.ValidateID(ok); err != nil {
			t.Fatalf("ValidateID(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "A", strings.Repeat("A", 21), strings.Repeat("A", 23), strings.Repeat("A", 21) + "+",
		strings.Repeat("A", 21) + "/", strings.Repeat("A", 21) + "=", strings.Repeat("A", 21) + "\x00", strings.Repeat("A", 20) + "é"} {
		err := lock.ValidateID(bad)
		if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("ValidateID(%q) = %v", bad, err)
		}
		if len(bad) > 3 && strings.Contains(err.Error(), bad) {
			t.Fatalf("the error repeats the id: %v", err)
		}
	}
}

func TestStorageKey(t *testing.T) {
	if got := lock.StorageKey("orders:42", 0, nil); got != "k:orders:42" {
		t.Fatalf("verbatim form %q", got)
	}
	long := strings.Repeat("x", 512)
	if got := lock.StorageKey(long, 100, nil); !strings.HasPrefix(got, lock.HashedPrefix) || len(got) != 45 {
		t.Fatalf("hashed form %q (%d bytes)", got, len(got))
	}
	noSlash := func(s string) bool { return !strings.Contains(s, "/") }
	if got := lock.StorageKey("a/b", 0, noSlash); !strings.HasPrefix(got, lock.HashedPrefix) || strings.Contains(got, "/") {
		t.Fatalf("a key the backend cannot store verbatim came out as %q", got)
	}
	// The hashed form depends on the key only.
	if lock.StorageKey(long, 100, nil) != lock.StorageKey(long, 60, noSlash) {
		t.Fatal("the hashed form depends on the budget")
	}
	// A key that spells a hashed name stays distinct from it.
	h := lock.StorageKey(long, 100, nil)
	if lock.StorageKey(h, 0, nil) == h {
		t.Fatal("a verbatim key collides with a hashed name")
	}
	// Budgets below the hashed size are raised to it.
	if got := lock.StorageKey("k", 1, nil); got != "k:k" {
		t.Fatalf("budget 1, short key: %q", got)
	}
	if got := lock.StorageKey(strings.Repeat("k", 50), 1, nil); len(got) != 45 {
		t.Fatalf("budget 1, long key: %q", got)
	}
	if got := lock.StorageKey(strings.Repeat("y", 43), 45, nil); got != "k:"+strings.Repeat("y", 43) {
		t.Fatalf("a key that fits the budget exactly was hashed: %q", got)
	}
}

// FuzzNormalizeKey checks normalisation on arbitrary bytes: it never
// panics, accepts exactly the keys of 1 to 512 bytes after NFC, is
// idempotent, and returns NFC.
func FuzzNormalizeKey(f *testing.F) {
	for _, s := range []string{"", "a", "cafe\u0301", "\u1100\u1161\u11a8", "a\xffb", strings.Repeat("e\u0301", 200), "fence:x", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := lock.NormalizeKey(in)
		n := norm.NFC.String(in)
		wantOK := len(n) > 0 && len(n) <= lock.MaxKeyBytes
		if wantOK != (err == nil) {
			t.Fatalf("NormalizeKey(%q): err %v; NFC length %d", in, err, len(n))
		}
		if err != nil {
			if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
				t.Fatalf("code %v", idemkit.CodeOf(err))
			}
			return
		}
		if got != n {
			t.Fatalf("NormalizeKey(%q) = %q; want NFC %q", in, got, n)
		}
		again, err := lock.NormalizeKey(got)
		if err != nil || again != got {
			t.Fatalf("not idempotent: %q → %q, %v", got, again, err)
		}
	})
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
		sa, sb := lock.StorageKey(a, budget, valid), lock.StorageKey(b, budget, valid)
		if a != b && sa == sb {
			t.Fatalf("keys %q and %q share the storage name %q", a, b, sa)
		}
		for _, s := range []string{sa, sb} {
			if !strings.HasPrefix(s, lock.VerbatimPrefix) && !strings.HasPrefix(s, lock.HashedPrefix) {
				t.Fatalf("storage name %q has no form prefix", s)
			}
			if budget > 0 && len(s) > max(budget, 45) {
				t.Fatalf("storage name of %d bytes exceeds the budget %d", len(s), budget)
			}
			if strings.HasPrefix(s, lock.VerbatimPrefix) && !valid(s[len(lock.VerbatimPrefix):]) {
				t.Fatalf("a key the backend cannot store came out verbatim: %q", s)
			}
		}
	})
}

// FuzzValidateID checks lock-id validation on arbitrary strings against its
// definition: exactly 22 characters of the base64url alphabet.
func FuzzValidateID(f *testing.F) {
	f.Add("AAAAAAAAAAAAAAAAAAAAAA")
	f.Add("AAAAAAAAAAAAAAAAAAAAA=")
	f.Add("")
	f.Add(lock.NewID())
	f.Fuzz(func(t *testing.T, id string) {
		err := lock.ValidateID(id)
		ok := len(id) == 22 && strings.Trim(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") == ""
		if ok != (err == nil) {
			t.Fatalf("ValidateID(%q) = %v; want ok = %v", id, err, ok)
		}
		if err != nil && idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("code %v", idemkit.CodeOf(err))
		}
	})
}
