package lock_test

import (
	"strings"
	"testing"

	"github.com/idemkit/idemkit/lock"
)

// Known keyHash values of the SyncGuard library, which the compatible
// hasher must reproduce.
func TestSyncGuardHasherVectors(t *testing.T) {
	vectors := map[string]string{
		"resource:123":           "e90a28c676a29a3291e2874a",
		"payment:42":             "602228725e82081670294dde",
		"":                       "000000000000000000000000",
		"a":                      "0000006100000123000002a7",
		"caf\u00e9":              "002e7a21248b3503a22cdb87",
		"cafe\u0301":             "002e7a21248b3503a22cdb87",
		"\u00e9":                 "000000e9000002bb0000065f",
		"e\u0301":                "000000e9000002bb0000065f",
		"\U0001F512":             "001b0c75014469ff2f4d79d3",
		"キー":                     "000615ef0049046d0aa5da29",
		strings.Repeat("x", 512): "53ef0000dab400001a400000",
		"AAAAAAAAAAAAAAAAAAAAAA": "761621603f31b080201c6800",
	}
	for in, want := range vectors {
		if got := lock.SyncGuardHasher().Hash(in); got != want {
			t.Errorf("SyncGuardHasher(%q) = %s; want %s", in, got, want)
		}
	}
}

func TestHMACHasher(t *testing.T) {
	a := lock.NewHMACHasher([]byte("secret one"))
	b := lock.NewHMACHasher([]byte("secret two"))
	if a.Hash("k") != lock.NewHMACHasher([]byte("secret one")).Hash("k") {
		t.Fatal("the same secret gives different hashes")
	}
	if a.Hash("k") == b.Hash("k") || a.Hash("k") == a.Hash("j") {
		t.Fatal("hashes do not depend on the secret and the input")
	}
	if h := a.Hash("k"); len(h) != 24 || strings.Trim(h, "0123456789abcdef") != "" {
		t.Fatalf("hash %q is not 24 hex characters", h)
	}
	if d := lock.DefaultHasher(); d.Hash("k") != d.Hash("k") || d.Hash("k") == a.Hash("k") {
		t.Fatal("the default hasher is not stable or not keyed")
	}
	secret := []byte("mutable")
	c := lock.NewHMACHasher(secret)
	before := c.Hash("k")
	secret[0] = 'X'
	if c.Hash("k") != before {
		t.Fatal("the hasher shares the caller's secret slice")
	}
}
