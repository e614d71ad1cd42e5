package firestorestore

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestDocID checks which keys are their own document id and which are
// hashed.
func TestDocID(t *testing.T) {
	for _, key := range []string{
		"order-1", "idempotency:tenant-7:order 42", "caf\u00e9 \U0001F512", "cafe\u0301", "...", "_x_", "___",
		"#sha256", "a#sha256:", strings.Repeat("k", maxDocIDBytes), " ", "k:", "h:x",
	} {
		if got := docID(key); got != key {
			t.Errorf("docID(%q) = %q; want the key itself", key, got)
		}
	}
	for _, key := range []string{
		"/", "a/b", "orders/", ".", "..", "__x__", "____", "__.*__", "\xff\xfe", "a\x00b", "line\nbreak", "del\x7f",
		"c1\u0085", hashedPrefix, hashedPrefix + "abc", strings.Repeat("k", maxDocIDBytes+1),
	} {
		got := docID(key)
		if !strings.HasPrefix(got, hashedPrefix) || len(got) != len(hashedPrefix)+43 {
			t.Errorf("docID(%q) = %q; want a hashed id", key, got)
		}
	}
}

// FuzzDocID checks that every key gets a document id Firestore accepts,
// verbatim or marked as hashed, and that two distinct keys never share
// one.
func FuzzDocID(f *testing.F) {
	for _, s := range []string{"", "k", "/", ".", "..", "__x__", "\xff", hashedPrefix, "a/b", "caf\u00e9", strings.Repeat("x", 1501)} {
		f.Add(s, "k")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, key := range []string{a, b} {
			id := docID(key)
			if key != "" && !validDocID(id) {
				t.Fatalf("docID(%q) = %q: not a valid Firestore document id", key, id)
			}
			switch {
			case id == key:
				if strings.HasPrefix(id, hashedPrefix) {
					t.Fatalf("docID(%q) = %q: a verbatim id with the hash marker", key, id)
				}
			case !strings.HasPrefix(id, hashedPrefix) || len(id) != len(hashedPrefix)+43:
				t.Fatalf("docID(%q) = %q: neither the key nor a marked hash", key, id)
			}
		}
		if a != b && docID(a) == docID(b) {
			t.Fatalf("docID(%q) = docID(%q) = %q", a, b, docID(a))
		}
	})
}

// validDocID reports whether id is a document id by Firestore's rules
// (valid UTF-8 of 1 to 1,500 bytes, no "/", not "." or "..", not of the
// form __.*__), and readable (no control characters).
func validDocID(id string) bool {
	if id == "" || len(id) > maxDocIDBytes || !utf8.ValidString(id) || id == "." || id == ".." ||
		strings.Contains(id, "/") || len(id) >= 4 && strings.HasPrefix(id, "__") && strings.HasSuffix(id, "__") {
		return false
	}
	return strings.IndexFunc(id, unicode.IsControl) < 0
}
