package firestorelock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
)

// TestKeyKinds checks, for each kind of key Firestore cannot take as a
// document id verbatim and for long and non-ASCII keys, that acquire,
// lookup by key and by id, extend (by id and with the key) and release (by
// id and with the key) all find the lock, that its document sits in the
// lock collection itself (never a sub-collection), and that fences keep
// growing across releases.
func TestKeyKinds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, key string }{
		{"slash", "POST:/v1/payments/abc"},
		{"odd-slashes", "a/b"},
		{"only-slash", "/"},
		{"dot", "."},
		{"dot-dot", ".."},
		{"reserved", "__x__"},
		{"reserved-long", "__idemkit_locks__"},
		{"512-bytes", strings.Repeat("k", lock.MaxKeyBytes)},
		{"512-bytes-with-slashes", strings.Repeat("a/", lock.MaxKeyBytes/2)},
		{"non-ascii", "キー:café:🔒"},
		{"decomposed", "cafe\u0301/ü"},
		{"invalid-utf8", "\xff\xfe/x"},
		{"nul-and-controls", "a\x00b\tc\n"},
		{"unicode-line-breaks", "\u0085\u2028x"},
		{"noncharacters", "\uFFFE\uFFFF\U0010FFFF"},
		{"invisible", "\u00a0a\u200bb\ufeff"},
		{"combining-first", "\u0300"},
		{"markup-and-escapes", "`*[]~#?%2F"},
		{"128-emoji", strings.Repeat("\U0001F512", 128)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := project(t)
			l := newLocker(t, p)
			pr := newProbes(t, p, l)
			ctx := t.Context()
			norm, err := lock.NormalizeKey(c.key)
			if err != nil {
				t.Fatal(err)
			}

			lease := acquireOK(t, l, c.key, time.Minute)
			if lease.Key != norm || lease.Fence < 1 {
				t.Fatalf("lease key %q fence %v; want the normalised key and a fence", lease.Key, lease.Fence)
			}
			if _, ok, err := l.Acquire(ctx, c.key, time.Minute); ok || err != nil {
				t.Fatalf("second Acquire = %v, %v; want locked", ok, err)
			}
			byKey, ok, err := lock.LookupKeyRaw(ctx, l, c.key)
			if err != nil || !ok || byKey.Key != norm || byKey.ID != lease.ID {
				t.Fatalf("LookupKey = %v, %v, %v", byKey, ok, err)
			}
			byID, ok, err := lock.LookupIDRaw(ctx, l, lease.ID)
			if err != nil || !ok || byID.Key != norm || byID.Fence != lease.Fence {
				t.Fatalf("LookupID = %v, %v, %v", byID, ok, err)
			}
			snaps, err := pr.locks.Documents(ctx).GetAll()
			if err != nil {
				t.Fatal(err)
			}
			if len(snaps) != 1 || snaps[0].Ref.ID != firestorelock.DocID(norm) {
				t.Fatalf("%d documents in the lock collection; want exactly the key's own", len(snaps))
			}
			if n := len(snaps[0].Ref.ID); n > firestorelock.MaxDocIDBytes {
				t.Fatalf("document id of %d bytes", n)
			}

			out, err := l.Extend(ctx, lease.ID, 2*time.Minute)
			if err != nil || !out.OK {
				t.Fatalf("Extend = %+v, %v", out, err)
			}
			if out, err = l.ExtendKey(ctx, c.key, lease.ID, 3*time.Minute); err != nil || !out.OK {
				t.Fatalf("ExtendKey = %+v, %v", out, err)
			}
			if info, ok, err := l.LookupKey(ctx, c.key); err != nil || !ok || !info.ExpiresAt.Equal(out.ExpiresAt) {
				t.Fatalf("LookupKey after extend = %v, %v, %v; want expiry %v", info, ok, err, out.ExpiresAt)
			}
			if out, err := l.Release(ctx, lease.ID); err != nil || !out.OK {
				t.Fatalf("Release = %+v, %v", out, err)
			}
			if locked, err := l.IsLocked(ctx, c.key); err != nil || locked {
				t.Fatalf("IsLocked after release = %v, %v", locked, err)
			}
			if stored, err := pr.stored(ctx, c.key); err != nil || stored {
				t.Fatalf("lease stored after release = %v, %v; want gone", stored, err)
			}

			again := acquireOK(t, l, c.key, time.Minute)
			if again.Fence <= lease.Fence {
				t.Fatalf("fence after release %v; want above %v", again.Fence, lease.Fence)
			}
			if out, err := l.ReleaseKey(ctx, c.key, again.ID); err != nil || !out.OK {
				t.Fatalf("ReleaseKey = %+v, %v", out, err)
			}
			if f, err := pr.fence(ctx, c.key); err != nil || (f != 0 && f != again.Fence) {
				t.Fatalf("fence %v, %v after release; want a tombstone with %v or nothing", f, err, again.Fence)
			}
			if n := count(t, pr.locks); n > 1 {
				t.Fatalf("%d documents in the lock collection; want at most the key's own", n)
			}
		})
	}
}
