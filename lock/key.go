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
// normalisation (both spellings of a key address one lock); any other byte
// sequence is a valid key, stored as it is.
const MaxKeyBytes = 512

// normalizeKey returns key in NFC, or InvalidArgument when it is empty or
// longer than MaxKeyBytes after normalisation.
func normalizeKey(op, key string) (string, error) {
	if key == "" {
		return "", invalid(op, "key must not be empty")
	}
	if len(key) > MaxKeyBytes*4 { // too long even for NFC, which shrinks up to threefold
		return "", invalid(op, fmt.Sprintf("key exceeds %d bytes after normalisation", MaxKeyBytes))
	}
	n := key
	if !norm.NFC.IsNormalString(key) {
		n = norm.NFC.String(key)
	}
	if len(n) > MaxKeyBytes {
		return "", invalid(op, fmt.Sprintf("key exceeds %d bytes after normalisation (%d bytes)", MaxKeyBytes, len(n)))
	}
	return n, nil
}

// newID returns a fresh lock id: 16 bytes from crypto/rand (which does not
// fail on supported platforms) in unpadded base64url.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// checkID refuses anything but the form of a lock id, without repeating it.
func checkID(op, id string) error {
	if !engine.LockID(id) {
		return invalid(op, fmt.Sprintf("lock id must be %d base64url characters", engine.IDLen))
	}
	return nil
}

// checkTTL refuses a TTL under a millisecond, every store's resolution.
func checkTTL(op string, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return invalid(op, fmt.Sprintf("ttl must be at least 1ms (got %v)", ttl))
	}
	return nil
}
