package firestorestore

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxDocIDBytes is the longest document id Firestore accepts.
const maxDocIDBytes = 1500

// hashedPrefix marks a document id that is the hash of its key rather than
// the key itself.
const hashedPrefix = "#sha256:"

// docID returns the id of the document that holds the record of key (any
// bytes, taken as they are): the key itself when Firestore can hold it as a
// document id and an operator can read it, else [hashedPrefix] and the
// unpadded base64url SHA-256 of the key (51 bytes in all).
//
// A key is taken verbatim when it is valid UTF-8 of at most 1,500 bytes,
// without "/" (which would make a path) or control characters, is neither
// "." nor "..", does not have Firestore's reserved form "__...__", and does
// not itself start with [hashedPrefix]. So a verbatim id never starts with
// the prefix and a hashed one always does: distinct keys never share a
// document (up to SHA-256 collisions).
func docID(key string) string {
	if verbatim(key) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return hashedPrefix + base64.RawURLEncoding.EncodeToString(sum[:])
}

// verbatim reports whether key can be its own document id.
func verbatim(key string) bool {
	switch {
	case key == "" || key == "." || key == "..":
		return false
	case len(key) > maxDocIDBytes:
		return false
	case len(key) >= 4 && strings.HasPrefix(key, "__") && strings.HasSuffix(key, "__"):
		return false
	case strings.HasPrefix(key, hashedPrefix):
		return false
	case !utf8.ValidString(key):
		return false
	}
	for _, r := range key {
		if r == '/' || unicode.IsControl(r) {
			return false
		}
	}
	return true
}
