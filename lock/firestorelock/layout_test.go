package firestorelock_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
)

// TestDocID checks that every key gets a document id Firestore accepts
// (valid UTF-8, no "/", not "." or "..", not "__...__", at most 1500
// bytes), and that distinct keys get distinct ids.
func TestDocID(t *testing.T) {
	t.Parallel()
	keys := []string{
		"k", "a/b", "a/b/c", "/", ".", "..", "__x__", "__", "k:x", "h:x", "fence:x",
		strings.Repeat("k", lock.MaxKeyBytes), strings.Repeat("é", lock.MaxKeyBytes/2), strings.Repeat("/", lock.MaxKeyBytes),
		strings.Repeat("k", 2000), "キー", "🔒", "\xff\xfe", "a\x00b", "tab\t", "del\x7f",
	}
	seen := make(map[string]string)
	for _, k := range keys {
		id := firestorelock.DocID(k)
		switch {
		case !utf8.ValidString(id), strings.Contains(id, "/"), id == "." || id == "..",
			strings.HasPrefix(id, "__") && strings.HasSuffix(id, "__"), len(id) > firestorelock.MaxDocIDBytes, id == "":
			t.Fatalf("DocID(%q) = %q: not a valid document id", k, id)
		}
		if other, ok := seen[id]; ok {
			t.Fatalf("DocID(%q) = DocID(%q) = %q", k, other, id)
		}
		seen[id] = k
	}
	for k, want := range map[string]string{".": "k:.", "..": "k:..", "__x__": "k:__x__", "café": "k:café"} {
		if got := firestorelock.DocID(k); got != want {
			t.Fatalf("DocID(%q) = %q; want %q (readable keys stay verbatim)", k, got, want)
		}
	}
	for _, k := range []string{"a/b", "a\x00b", "\xff"} {
		if got := firestorelock.DocID(k); !strings.HasPrefix(got, lock.HashedPrefix) {
			t.Fatalf("DocID(%q) = %q; want a hashed id", k, got)
		}
	}
}

// TestCheckCollection checks the collection-name rule.
func TestCheckCollection(t *testing.T) {
	t.Parallel()
	for name, ok := range map[string]bool{
		"idemkit_locks": true, "a": true, "A-b.c_9": true, strings.Repeat("c", 100): true,
		"": false, ".": false, "..": false, "__x__": false, "a/b": false, "ä": false, "a b": false, strings.Repeat("c", 101): false,
	} {
		err := firestorelock.CheckCollection("lock collection", name)
		if (err == nil) != ok {
			t.Fatalf("CheckCollection(%q) = %v; want ok = %v", name, err, ok)
		}
		if err != nil && lock.CodeOf(err) != lock.CodeInvalidArgument {
			t.Fatalf("CheckCollection(%q) = %v; want InvalidArgument", name, err)
		}
	}
}

// TestValues checks the value helpers that the store shares.
func TestValues(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", "キー", "\xff\xfe"} {
		v := firestorelock.Text(s)
		if _, isString := v.(string); isString != utf8.ValidString(s) {
			t.Fatalf("Text(%q) = %T", s, v)
		}
		if back, ok := firestorelock.FromText(v); !ok || back != s {
			t.Fatalf("FromText(Text(%q)) = %q, %v", s, back, ok)
		}
	}
	if _, ok := firestorelock.FromText(42); ok {
		t.Fatal("FromText(42) ok")
	}
	for _, tc := range []struct {
		v    any
		want lock.Fence
		ok   bool
	}{{int64(0), 0, true}, {int64(7), 7, true}, {int64(lock.FenceMax), lock.FenceMax, true}, {int64(-1), 0, false}, {"7", 0, false}, {nil, 0, false}} {
		if f, ok := firestorelock.DecodeFence(tc.v); f != tc.want || ok != tc.ok {
			t.Fatalf("DecodeFence(%#v) = %v, %v; want %v, %v", tc.v, f, ok, tc.want, tc.ok)
		}
	}
	now := time.Now()
	if m := firestorelock.Micro(now); m.Nanosecond()%1000 != 0 || now.Sub(m) >= time.Microsecond || m != m.Round(0) {
		t.Fatalf("Micro(%v) = %v", now, m)
	}
}
