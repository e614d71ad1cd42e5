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

const hashedPrefix = "#sha256:" // marks a document id that is its key's hash

// docID returns the id of the document that holds the record of key (any
// bytes, as they are): the key itself when it can be ([verbatim]), else
// [hashedPrefix] and its unpadded base64url SHA-256. A verbatim id never
// starts with the prefix, so distinct keys never share a document.
func docID(key string) string {
	if verbatim(key) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return hashedPrefix + base64.RawURLEncoding.EncodeToString(sum[:])
}

// verbatim reports whether key can be its own document id: valid UTF-8
// Firestore accepts as an id ("/" would make a path) and an operator can
// read, not starting with [hashedPrefix].
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
