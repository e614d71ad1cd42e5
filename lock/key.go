package lock

import (
	"crypto/rand"
	"crypto/sha256"
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

// Storage-key forms. A derived name is either the verbatim key behind
// [VerbatimPrefix] or a hash behind [HashedPrefix]; the two prefixes differ,
// so a verbatim key can never spell a hashed one.
const (
	VerbatimPrefix = "k:"
	HashedPrefix   = "h:"
)

// hashedLen is the length of a hashed storage key: the prefix plus 43
// characters of unpadded base64url (the whole SHA-256 digest).
const hashedLen = len(HashedPrefix) + 43

// StorageKey derives the part of a backend's storage name that stands for a
// normalised user key. It returns [VerbatimPrefix]+key when that fits in
// maxLen bytes and verbatim (if not nil) accepts the key, and otherwise
// [HashedPrefix] followed by the unpadded base64url SHA-256 of the key (45
// bytes in all).
//
// Backends build every name from a fixed namespace of their own (the kind of
// record: lock, id index) followed by this derived part, so
// the mapping from user keys to names is injective (up to SHA-256
// collisions) and no user key can ever address an internal record: whatever
// the key, its derived part starts with one of two fixed prefixes and sits
// after the namespace.
//
// maxLen below the size of a hashed key is raised to it; 0 means no limit.
func StorageKey(key string, maxLen int, verbatim func(string) bool) string {
	if maxLen > 0 && maxLen < hashedLen {
		maxLen = hashedLen
	}
	if (maxLen == 0 || len(VerbatimPrefix)+len(key) <= maxLen) && (verbatim == nil || verbatim(key)) {
		return VerbatimPrefix + key
	}
	sum := sha256.Sum256([]byte(key))
	return HashedPrefix + base64.RawURLEncoding.EncodeToString(sum[:])
}
