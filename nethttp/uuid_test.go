package nethttp

import (
	"regexp"
	"testing"
)

func TestNewUUID(t *testing.T) {
	uuidV4 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 1000 {
		u := newUUID()
		if !uuidV4.MatchString(u) || seen[u] {
			t.Fatalf("newUUID() = %q (repeated: %v)", u, seen[u])
		}
		seen[u] = true
	}
}
