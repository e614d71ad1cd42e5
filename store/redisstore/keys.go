package redisstore

import (
	"crypto/sha256"
	"encoding/base64"
	"unicode/utf8"
)

// maxVerbatimKeyBytes is the longest record key stored under its own name;
// longer ones are hashed.
const maxVerbatimKeyBytes = 512

// hashMarker starts every hashed key, and no verbatim one: a record key
// that starts with '@' is always hashed, so the two forms never meet.
const hashMarker = "@sha256:"

// redisKey returns the Redis key of the record key k (already validated):
// the prefix, then k itself when it is readable (see [verbatim]), else
// hashMarker and the unpadded base64url SHA-256 of k.
func (s *Store) redisKey(k string) string {
	if verbatim(k) {
		return s.prefix + k
	}
	sum := sha256.Sum256([]byte(k))
	return s.prefix + hashMarker + base64.RawURLEncoding.EncodeToString(sum[:])
}

// verbatim reports whether k is stored under its own name: at most
// maxVerbatimKeyBytes bytes of valid UTF-8 without control characters
// (C0, DEL, C1), not starting with '@'.
func verbatim(k string) bool {
	if len(k) > maxVerbatimKeyBytes || k == "" || k[0] == hashMarker[0] {
		return false
	}
	for i := 0; i < len(k); {
		c := k[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(k[i:])
		if r == utf8.RuneError && size == 1 || r >= 0x80 && r <= 0x9f {
			return false
		}
		i += size
	}
	return true
}
