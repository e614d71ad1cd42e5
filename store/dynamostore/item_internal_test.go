package dynamostore

import (
	"strings"
	"testing"
)

// TestEncodeKey: a UTF-8 key not starting with "#" is its own partition
// key; any other is "#" and its base64url, which decodes back; no two
// keys share one, and the longest key's fits DynamoDB's 2,048 bytes.
func TestEncodeKey(t *testing.T) {
	seen := map[string]string{}
	for _, tc := range []struct {
		key      string
		verbatim bool
	}{
		{"order-1", true}, {"a/b", true}, {"caf\u00e9", true}, {"\x00", true}, {strings.Repeat("k", 1024), true},
		{"#", false}, {"#b3JkZXItMQ", false}, {"\xff", false}, {"order-1\xff", false}, {strings.Repeat("\xff", 1024), false},
	} {
		key := tc.key
		pk := encodeKey(key)
		if tc.verbatim != (pk == key) {
			t.Errorf("encodeKey(%q) = %q; want verbatim %v", key, pk, tc.verbatim)
		}
		if back, ok := decodeKey(pk); !ok || back != key {
			t.Errorf("decodeKey(encodeKey(%q)) = %q, %v", key, back, ok)
		}
		if other, dup := seen[pk]; dup {
			t.Errorf("%q and %q share the partition key %q", key, other, pk)
		}
		seen[pk] = key
		if len(pk) > 2048 {
			t.Errorf("the partition key of a %d-byte key is %d bytes", len(key), len(pk))
		}
	}
}
