package lock

import (
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store/engine"
)

func TestNormalizeKeyNFCAndLength(t *testing.T) {
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
		got, err := normalizeKey("validate", c.in)
		if c.ok != (err == nil) || got != c.want {
			t.Fatalf("%s: normalizeKey = %q, %v", c.name, got, err)
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

func TestCheckID(t *testing.T) {
	for range 100 {
		id := newID()
		if err := checkID("validate", id); err != nil || len(id) != engine.IDLen {
			t.Fatalf("NewID() = %q fails checkID: %v", id, err)
		}
	}
	if a, b := newID(), newID(); a == b {
		t.Fatal("two ids are equal")
	}
	for _, ok := range []string{"AAAAAAAAAAAAAAAAAAAAAA", "_____________________w", "abcdefghijklmnopqrstu-"} {
		if err := checkID("validate", ok); err != nil {
			t.Fatalf("checkID(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "A", strings.Repeat("A", 21), strings.Repeat("A", 23), strings.Repeat("A", 21) + "+",
		strings.Repeat("A", 21) + "/", strings.Repeat("A", 21) + "=", strings.Repeat("A", 21) + "\x00", strings.Repeat("A", 20) + "é"} {
		err := checkID("validate", bad)
		if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("checkID(%q) = %v", bad, err)
		}
		if len(bad) > 3 && strings.Contains(err.Error(), bad) {
			t.Fatalf("the error repeats the id: %v", err)
		}
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
		got, err := normalizeKey("validate", in)
		n := norm.NFC.String(in)
		wantOK := len(n) > 0 && len(n) <= MaxKeyBytes
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
		again, err := normalizeKey("validate", got)
		if err != nil || again != got {
			t.Fatalf("not idempotent: %q → %q, %v", got, again, err)
		}
	})
}

// FuzzValidateID checks lock-id validation on arbitrary strings against its
// definition: exactly 22 characters of the base64url alphabet.
func FuzzValidateID(f *testing.F) {
	f.Add("AAAAAAAAAAAAAAAAAAAAAA")
	f.Add("AAAAAAAAAAAAAAAAAAAAA=")
	f.Add("")
	f.Add(newID())
	f.Fuzz(func(t *testing.T, id string) {
		err := checkID("validate", id)
		ok := len(id) == 22 && strings.Trim(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") == ""
		if ok != (err == nil) {
			t.Fatalf("checkID(%q) = %v; want ok = %v", id, err, ok)
		}
		if err != nil && idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("code %v", idemkit.CodeOf(err))
		}
	})
}
