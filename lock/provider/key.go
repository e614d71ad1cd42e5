package provider

import (
	"crypto/sha256"
	"encoding/base64"
)

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
