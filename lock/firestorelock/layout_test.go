package firestorelock_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idemkit/lock/provider"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
)

// validDocID says what is wrong with id as a Firestore document id, or ""
// when nothing is: valid UTF-8, no "/", not "." or "..", not "__...__",
// 1 to 1500 bytes.
func validDocID(id string) string {
	switch {
	case id == "":
		return "empty"
	case !utf8.ValidString(id):
		return "not UTF-8"
	case strings.Contains(id, "/"):
		return "has a /"
	case id == "." || id == "..":
		return "is . or .."
	case strings.HasPrefix(id, "__") && strings.HasSuffix(id, "__"):
		return "is reserved (__...__)"
	case len(id) > firestorelock.MaxDocIDBytes:
		return "too long"
	}
	return ""
}

// TestDocID checks that every key gets a document id Firestore accepts,
// and that distinct keys get distinct ids.
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
		if why := validDocID(id); why != "" {
			t.Fatalf("DocID(%q) = %q: not a valid document id (%s)", k, id, why)
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
		if got := firestorelock.DocID(k); !strings.HasPrefix(got, provider.HashedPrefix) {
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
		err := firestorelock.CheckCollection(name)
		if (err == nil) != ok {
			t.Fatalf("CheckCollection(%q) = %v; want ok = %v", name, err, ok)
		}
		if err != nil && idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("CheckCollection(%q) = %v; want InvalidArgument", name, err)
		}
	}
}

// TestTombstoneExpiry checks a tombstone's expireAt: the instant the
// server clock passes its fence, clamped to Firestore's last timestamp for
// fences beyond it.
func TestTombstoneExpiry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		f    idemkit.Fence
		want time.Time
	}{
		{1, time.UnixMilli(2)},
		{1_800_000_000_000, time.UnixMilli(1_800_000_000_001)},
		{idemkit.FenceMax - 1, firestorelock.MaxTimestamp},
		{idemkit.FenceMax, firestorelock.MaxTimestamp},
	} {
		at, ok := firestorelock.TombstoneData("k", tc.f)[firestorelock.FieldExpireAt].(time.Time)
		if !ok || !at.Equal(tc.want) {
			t.Fatalf("tombstone of fence %v expires at %v; want %v", tc.f, at, tc.want)
		}
	}
	if want := time.Date(9999, 12, 31, 23, 59, 59, 999_999_000, time.UTC); !firestorelock.MaxTimestamp.Equal(want) {
		t.Fatalf("the last timestamp is %v; want Firestore's %v", firestorelock.MaxTimestamp, want)
	}
}

// FuzzDocID checks, for any two keys (what clients send ends up here),
// that each gets a valid document id and that distinct keys never share
// one, and that readable keys stay verbatim.
func FuzzDocID(f *testing.F) {
	for _, s := range []string{"", "k", "/", ".", "..", "__x__", "k:x", "h:x", "a/b", "\xff", "a\x00b", strings.Repeat("é", 800)} {
		f.Add(s, s+"/")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ida, idb := firestorelock.DocID(a), firestorelock.DocID(b)
		for _, c := range []struct{ key, id string }{{a, ida}, {b, idb}} {
			if why := validDocID(c.id); why != "" {
				t.Fatalf("DocID(%q) = %q: not a valid document id (%s)", c.key, c.id, why)
			}
		}
		if a != b && ida == idb {
			t.Fatalf("DocID(%q) = DocID(%q) = %q", a, b, ida)
		}
		if !strings.HasPrefix(ida, "k:") && !strings.HasPrefix(ida, provider.HashedPrefix) {
			t.Fatalf("DocID(%q) = %q: neither verbatim nor hashed", a, ida)
		}
	})
}
