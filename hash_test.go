package idemkit_test

import (
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
)

func TestHMACHasher(t *testing.T) {
	a := idemkit.NewHMACHasher([]byte("secret one"))
	b := idemkit.NewHMACHasher([]byte("secret two"))
	if a.Hash("k") != idemkit.NewHMACHasher([]byte("secret one")).Hash("k") {
		t.Fatal("the same secret gives different hashes")
	}
	if a.Hash("k") == b.Hash("k") || a.Hash("k") == a.Hash("j") {
		t.Fatal("hashes do not depend on the secret and the input")
	}
	if h := a.Hash("k"); len(h) != 24 || strings.Trim(h, "0123456789abcdef") != "" {
		t.Fatalf("hash %q is not 24 hex characters", h)
	}
	if d := idemkit.DefaultHasher(); d.Hash("k") != d.Hash("k") || d.Hash("k") == a.Hash("k") {
		t.Fatal("the default hasher is not stable or not keyed")
	}
	secret := []byte("mutable")
	c := idemkit.NewHMACHasher(secret)
	before := c.Hash("k")
	secret[0] = 'X'
	if c.Hash("k") != before {
		t.Fatal("the hasher shares the caller's secret slice")
	}
}
