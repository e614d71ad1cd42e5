package firestorelock

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idemkit/lock/provider"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// defaultCollection is the collection of the lock documents unless
// [WithCollection] names another.
const defaultCollection = "idemkit_locks"

// Field names of the lock documents (see the package documentation).
const (
	fieldKey        = "key"        // the normalised key: a string, or bytes when it is not valid UTF-8
	fieldLockID     = "lockId"     // the lock id; absent from a tombstone
	fieldFence      = "fence"      // the fence; absent from a lease created on a free key (its create time in ms)
	fieldAcquiredAt = "acquiredAt" // the server's read time when the lease was granted; absent from a tombstone
	fieldExpiresAt  = "expiresAt"  // acquiredAt (or the last extend's read time) + TTL; absent from a tombstone
	fieldExpireAt   = "expireAt"   // when the document may be deleted: the TTL-policy field
)

// maxDocIDBytes is the longest document id Firestore accepts.
const maxDocIDBytes = 1500

// maxCollectionBytes is the longest collection name New accepts.
const maxCollectionBytes = 100

// maxTimestamp is the latest instant Firestore stores. Expiries past it
// (those of fences raised near idemkit.FenceMax) are clamped to it.
var maxTimestamp = time.Date(9999, 12, 31, 23, 59, 59, 999_999_000, time.UTC)

// clamp returns t at Firestore's resolution (microseconds, without a
// monotonic clock reading), no later than the latest instant Firestore
// stores.
func clamp(t time.Time) time.Time {
	if t.After(maxTimestamp) {
		return maxTimestamp
	}
	return t.Truncate(time.Microsecond)
}

// docID returns the document id that stands for a normalised key (any
// bytes): "k:" and the key itself when Firestore can hold it as an id and
// it is plain enough to read (valid UTF-8 without "/" or control
// characters), else "h:" and the unpadded base64url SHA-256 of the key
// (see [provider.StorageKey]). The prefix keeps every id clear of ".", ".."
// and the reserved "__...__" form, so every key has a valid id of its own,
// in the collection itself (a "/" never makes a sub-collection), and
// distinct keys never share one.
func docID(key string) string {
	return provider.StorageKey(key, maxDocIDBytes, docIDSafe)
}

// docIDSafe reports whether a document id can hold s verbatim after the
// "k:" prefix: valid UTF-8 without "/" and without C0 control characters
// or DEL (which Firestore's documentation does not promise to accept in
// ids, and which make ids unreadable in the console anyway).
func docIDSafe(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '/' || c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// checkCollection validates a collection name: 1 to 100 bytes of ASCII
// letters, digits, "_", "-" and ".", neither "." nor "..", and not of the
// reserved form "__...__". It returns an InvalidArgument error for op
// "new".
func checkCollection(name string) error {
	bad := func(why string) error {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "new", "the lock collection "+why, nil)
	}
	switch {
	case name == "":
		return bad("must not be empty")
	case len(name) > maxCollectionBytes:
		return bad(fmt.Sprintf("exceeds %d bytes", maxCollectionBytes))
	case name == "." || name == "..":
		return bad("must not be \".\" or \"..\"")
	case len(name) >= 4 && strings.HasPrefix(name, "__") && strings.HasSuffix(name, "__"):
		return bad("must not have Firestore's reserved form __...__")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return bad(fmt.Sprintf("has a character outside [A-Za-z0-9_.-] at byte %d", i))
		}
	}
	return nil
}

// text returns s as a Firestore value: a string when s is valid UTF-8
// (Firestore strings must be), else bytes. [fromText] reverses it.
func text(s string) any {
	if utf8.ValidString(s) {
		return s
	}
	return []byte(s)
}

// fromText reverses [text]: it accepts a string or bytes value.
func fromText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

// fenceAt is the fence of a lease created on a free key: its document's
// create time in Unix milliseconds. Firestore's create times grow when a
// document is deleted and created again, and a document is deleted only
// once the server clock has passed its fence, so this is above every
// fence the key carried before.
func fenceAt(created time.Time) idemkit.Fence { return idemkit.Fence(max(created.UnixMilli(), 1)) }

// lockDoc is the content of a lock document: a lease, or a tombstone (no
// lock id, no times) that only keeps the key's fence until the server
// clock passes it.
type lockDoc struct {
	key      string
	id       string // "" for a tombstone
	fence    idemkit.Fence
	implicit bool // the fence is the document's create time, not a field
	acquired time.Time
	expires  time.Time
}

// tombstone reports whether the document holds no lease.
func (d lockDoc) tombstone() bool { return d.id == "" }

// live reports whether the document holds a lease that is live at the
// server time now.
func (d lockDoc) live(now time.Time) bool { return !d.tombstone() && lock.Live(d.expires, now) }

// expireAt is when a lease document may be deleted: its lease's expiry
// plus the cleanup grace, and not before the server clock passes its
// fence. A lease being created on a free key does not know its fence yet
// (0): it will be the create time, which lies before the expiry unless
// the create takes longer than the lease's TTL and the grace to land, and
// every later write of the document (extend, release, cleanup, sweep)
// computes the field with the fence known.
func (d lockDoc) expireAt() time.Time {
	return clamp(provider.KeepUntil(d.fence, d.expires.Add(lock.CleanupGrace)))
}

// data is the whole lease document, for a Create or a transaction's Set.
// A lease whose fence is its create time has no fence field.
func (d lockDoc) data() map[string]any {
	m := map[string]any{
		fieldKey:        text(d.key),
		fieldLockID:     d.id,
		fieldAcquiredAt: d.acquired,
		fieldExpiresAt:  d.expires,
		fieldExpireAt:   d.expireAt(),
	}
	if !d.implicit {
		m[fieldFence] = int64(d.fence)
	}
	return m
}

// updates turns a tombstone into the lease d (every field but the key).
func (d lockDoc) updates() []firestore.Update {
	return []firestore.Update{
		{Path: fieldLockID, Value: d.id},
		{Path: fieldFence, Value: int64(d.fence)},
		{Path: fieldAcquiredAt, Value: d.acquired},
		{Path: fieldExpiresAt, Value: d.expires},
		{Path: fieldExpireAt, Value: d.expireAt()},
	}
}

// tombstoneAt is when the tombstone of fence f may be deleted.
func tombstoneAt(f idemkit.Fence) time.Time { return clamp(provider.KeepUntil(f, time.Time{})) }

// tombstoneData is the whole tombstone of key at fence f.
func tombstoneData(key string, f idemkit.Fence) map[string]any {
	return map[string]any{fieldKey: text(key), fieldFence: int64(f), fieldExpireAt: tombstoneAt(f)}
}

// tombstoneUpdates turns a lease document with fence f into its
// tombstone.
func tombstoneUpdates(f idemkit.Fence) []firestore.Update {
	return []firestore.Update{
		{Path: fieldLockID, Value: firestore.Delete},
		{Path: fieldAcquiredAt, Value: firestore.Delete},
		{Path: fieldExpiresAt, Value: firestore.Delete},
		{Path: fieldFence, Value: int64(f)},
		{Path: fieldExpireAt, Value: tombstoneAt(f)},
	}
}

// lease is the lease the document describes.
func (d lockDoc) lease() lock.Lease {
	return lock.Lease{Key: d.key, ID: d.id, Fence: d.fence, AcquiredAt: d.acquired, ExpiresAt: d.expires}
}

// at is the news that the document holds the lease d at the server time
// t (see [Locker.Watch]).
func (d lockDoc) at(t time.Time) leaseAt {
	return leaseAt{at: t, live: true, holder: d.id, expires: d.expires}
}

// info is the lookup result the document describes.
func (d lockDoc) info() lock.Info {
	return lock.NewInfo(d.key, d.id, d.fence, d.acquired, d.expires)
}

// malformed is the error for a document this package did not write as it
// reads it. The detail names the field, never a key or id.
func malformed(op, what string) error {
	return idemkit.NewError(idemkit.CodeInternal, op, "malformed document: "+what, nil)
}

// decode reads a lock document. It checks that the stored key maps to the
// document's own id, so a document copied or edited by hand under another
// id is reported rather than trusted.
func decode(op string, snap *firestore.DocumentSnapshot) (lockDoc, error) {
	m := snap.Data()
	var d lockDoc
	var ok bool
	if d.key, ok = fromText(m[fieldKey]); !ok {
		return lockDoc{}, malformed(op, "the key field is missing or not text")
	}
	if docID(d.key) != snap.Ref.ID {
		return lockDoc{}, malformed(op, "the key does not match the document id")
	}
	if v, ok := m[fieldFence]; ok {
		n, isInt := v.(int64)
		if !isInt || n < 1 {
			return lockDoc{}, malformed(op, "the fence is not a positive integer")
		}
		d.fence = idemkit.Fence(n)
	} else {
		d.fence, d.implicit = fenceAt(snap.CreateTime), true
	}
	v, isLease := m[fieldLockID]
	if !isLease {
		if d.implicit {
			return lockDoc{}, malformed(op, "a tombstone without a fence")
		}
		return d, nil
	}
	if d.id, ok = v.(string); !ok || lock.ValidateID(d.id) != nil {
		return lockDoc{}, malformed(op, "the lock id is not 22 base64url characters")
	}
	if d.acquired, ok = m[fieldAcquiredAt].(time.Time); !ok {
		return lockDoc{}, malformed(op, "the acquiredAt field is missing or not a timestamp")
	}
	if d.expires, ok = m[fieldExpiresAt].(time.Time); !ok {
		return lockDoc{}, malformed(op, "the expiresAt field is missing or not a timestamp")
	}
	return d, nil
}
