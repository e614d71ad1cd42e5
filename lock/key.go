package lock

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	"golang.org/x/text/unicode/norm"

	"github.com/idemkit/idemkit/store/engine"
)

// MaxKeyBytes is the longest lock key, in bytes after Unicode NFC
// normalisation. Keys are normalised, so composed and decomposed spellings
// of a key address the same lock; any other byte sequence (invalid UTF-8,
// NUL, "/", control characters) is a valid key, stored as it is.
const MaxKeyBytes = 512

// normalizeKey returns key in NFC, or InvalidArgument when it is empty or
// longer than MaxKeyBytes after normalisation.
func normalizeKey(op, key string) (string, error) {
	if key == "" {
		return "", invalid(op, "key must not be empty")
	}
	// NFC can shrink decomposed input (three Hangul jamo become one
	// syllable: a third of the bytes), so only an input too long even for
	// that is refused before the work of normalising it.
	if len(key) > MaxKeyBytes*4 {
		return "", invalid(op, fmt.Sprintf("key exceeds %d bytes after normalisation", MaxKeyBytes))
	}
	n := key
	if !isASCII(key) && !norm.NFC.IsNormalString(key) {
		n = norm.NFC.String(key)
	}
	if len(n) > MaxKeyBytes {
		return "", invalid(op, fmt.Sprintf("key exceeds %d bytes after normalisation (%d bytes)", MaxKeyBytes, len(n)))
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

// newID returns a fresh lock id: 16 bytes from crypto/rand as 22 characters
// of unpadded base64url (crypto/rand does not fail on supported platforms).
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// checkID refuses, with InvalidArgument, anything but the form of a lock
// id. The message never repeats the id.
func checkID(op, id string) error {
	if !engine.LockID(id) {
		return invalid(op, fmt.Sprintf("lock id must be %d base64url characters", engine.IDLen))
	}
	return nil
}

// checkTTL refuses a TTL under one millisecond, the resolution every
// store keeps.
func checkTTL(op string, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return invalid(op, fmt.Sprintf("ttl must be at least 1ms (got %v)", ttl))
	}
	return nil
}
