package lock

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	"golang.org/x/text/unicode/norm"
)

// MaxKeyBytes is the longest key, in bytes after Unicode NFC normalisation,
// that every backend accepts.
const MaxKeyBytes = 512

// IDLen is the length of a lock id: 16 random bytes in unpadded base64url.
const IDLen = 22

// NormalizeKey returns key in Unicode Normalization Form C, so that composed
// and decomposed spellings of a key address the same lock. It fails with
// InvalidArgument when the key is empty or longer than [MaxKeyBytes] bytes
// after normalisation. Any other byte sequence is a valid key, including
// invalid UTF-8, NUL, "/" and control characters: backends encode or hash
// keys they cannot store verbatim (see [StorageKey]).
func NormalizeKey(key string) (string, error) {
	if key == "" {
		return "", invalid("validate", "key must not be empty")
	}
	// NFC can shrink decomposed input (three Hangul jamo become one
	// syllable: a third of the bytes), so only an input too long even for
	// that is refused before the work of normalising it.
	if len(key) > MaxKeyBytes*4 {
		return "", invalid("validate", fmt.Sprintf("key exceeds %d bytes after normalisation", MaxKeyBytes))
	}
	n := key
	if !isASCII(key) && !norm.NFC.IsNormalString(key) {
		n = norm.NFC.String(key)
	}
	if len(n) > MaxKeyBytes {
		return "", invalid("validate", fmt.Sprintf("key exceeds %d bytes after normalisation (%d bytes)", MaxKeyBytes, len(n)))
	}
	return n, nil
}

// isASCII reports whether s is pure ASCII, which is always in NFC: the
// common case (UUIDs, routes) skips the normaliser.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// NewID returns a fresh lock id: 16 bytes from crypto/rand, encoded as 22
// characters of unpadded base64url. The operating system's random source
// does not fail on supported platforms (crypto/rand panics if it ever does).
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ValidateID reports an InvalidArgument error unless id has the form of a
// lock id: exactly 22 characters of the base64url alphabet. The message
// never repeats the id.
func ValidateID(id string) error {
	if len(id) != IDLen {
		return invalid("validate", fmt.Sprintf("lock id must be %d base64url characters (got %d bytes)", IDLen, len(id)))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return invalid("validate", fmt.Sprintf("lock id has a character outside base64url at position %d", i))
		}
	}
	return nil
}

// ValidateTTL reports an InvalidArgument error unless ttl is at least one
// millisecond, the resolution every backend keeps.
func ValidateTTL(ttl time.Duration) error {
	if ttl < time.Millisecond {
		return invalid("validate", fmt.Sprintf("ttl must be at least 1ms (got %v)", ttl))
	}
	return nil
}
