package testenv

import (
	"slices"
	"testing"
)

// TestNewRedisExtraDirectives: the directives NewRedis is given override
// the shared ones, and the others stay.
func TestNewRedisExtraDirectives(t *testing.T) {
	s := NewRedis(t, "--appendfsync", "everysec")
	for param, want := range map[string]string{"appendfsync": "everysec", "appendonly": "yes"} {
		v, err := call(s.Addr, "CONFIG", "GET", param)
		if got, _ := v.([]any); err != nil || !slices.Equal(got, []any{param, want}) {
			t.Fatalf("CONFIG GET %s: %v, %v; want [%s %s]", param, v, err, param, want)
		}
	}
}
