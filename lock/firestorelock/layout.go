package firestorelock

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// Default collection names.
const (
	DefaultCollection      = "idemkit_locks"       // the lock documents
	DefaultFenceCollection = "idemkit_lock_fences" // the fence counters
)

// Field names of the lock documents. [FieldLockID] needs Firestore's
// automatic single-field index (for Release, Extend and LookupID by lock
// id), [FieldExpireAt] too (for [Locker.Sweep]); [FieldExpireAt] is also
// the field to name in a TTL policy.
const (
	FieldKey        = "key"        // the normalised key: a string, or bytes when it is not valid UTF-8
	FieldLockID     = "lockId"     // the lock id (22 base64url characters)
	FieldFence      = "fence"      // the lease's fence (an integer); also the counter's only value
	FieldAcquiredAt = "acquiredAt" // when the lease was granted (client clock)
	FieldExpiresAt  = "expiresAt"  // when the lease runs out (client clock)
	FieldExpireAt   = "expireAt"   // expiresAt + lock.CleanupGrace: when the document may be deleted
)

// MaxDocIDBytes is the longest document id Firestore accepts.
const MaxDocIDBytes = 1500

// maxCollectionBytes is the longest collection name New accepts.
const maxCollectionBytes = 100

// DocID returns the document id that stands for key (any bytes): "k:" and
// the key itself when Firestore can hold it as an id and it is plain
// enough to read (valid UTF-8 without "/" or control characters, at most
// [MaxDocIDBytes] bytes in all), else "h:" and the unpadded base64url
// SHA-256 of the key (see [lock.StorageKey]). The prefix already keeps
// every id clear of ".", ".." and the reserved "__...__" form, so every key
// has a valid id of its own, in the collection itself (a "/" never makes a
// sub-collection), and distinct keys never share one.
//
// The locker applies it to normalised keys; a store applies it to its
// record keys as they are.
func DocID(key string) string {
	return lock.StorageKey(key, MaxDocIDBytes, docIDSafe)
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

// CheckCollection validates a collection name for an option named what:
// 1 to 100 bytes of ASCII letters, digits, "_", "-" and ".", neither "."
// nor "..", and not of the reserved form "__...__". It returns an
// InvalidArgument error for op "new".
func CheckCollection(what, name string) error {
	bad := func(why string) error {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "new", fmt.Sprintf("the %s %s", what, why), nil)
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

// Text returns s as a Firestore value: a string when s is valid UTF-8
// (Firestore strings must be), else bytes. [FromText] reverses it.
func Text(s string) any {
	if utf8.ValidString(s) {
		return s
	}
	return []byte(s)
}

// FromText reverses [Text]: it accepts a string or bytes value.
func FromText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

// Micro returns t at Firestore's resolution (microseconds), without its
// monotonic clock reading, so that what a lease reports equals what a
// lookup reads back.
func Micro(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

// lockDoc is the content of a lock document.
type lockDoc struct {
	key      string
	id       string
	fence    lock.Fence
	acquired time.Time
	expires  time.Time
}

// data is the whole document, for a Create.
func (d lockDoc) data() map[string]any {
	return map[string]any{
		FieldKey:        Text(d.key),
		FieldLockID:     d.id,
		FieldFence:      int64(d.fence),
		FieldAcquiredAt: d.acquired,
		FieldExpiresAt:  d.expires,
		FieldExpireAt:   d.expires.Add(lock.CleanupGrace),
	}
}

// counterData is the whole fence-counter document of key at fence f.
// The key is kept for inspection only; the counter is found by its id.
func counterData(key string, f lock.Fence) map[string]any {
	return map[string]any{FieldFence: int64(f), FieldKey: Text(key)}
}

// lease is the lease the document describes.
func (d lockDoc) lease() lock.Lease {
	return lock.Lease{Key: d.key, ID: d.id, Fence: d.fence, AcquiredAt: d.acquired, ExpiresAt: d.expires}
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

// decodeLock reads a lock document. It checks that the stored key maps to
// the document's own id, so a document copied or edited by hand under
// another id is reported rather than trusted.
func decodeLock(op string, snap *firestore.DocumentSnapshot) (lockDoc, error) {
	m := snap.Data()
	var d lockDoc
	var ok bool
	if d.key, ok = FromText(m[FieldKey]); !ok {
		return lockDoc{}, malformed(op, "the lock's key field is missing or not text")
	}
	if DocID(d.key) != snap.Ref.ID {
		return lockDoc{}, malformed(op, "the lock's key does not match its document id")
	}
	if d.id, ok = m[FieldLockID].(string); !ok {
		return lockDoc{}, malformed(op, "the lock id field is missing or not a string")
	}
	if d.fence, ok = DecodeFence(m[FieldFence]); !ok {
		return lockDoc{}, malformed(op, "the lock's fence is missing or not a non-negative integer")
	}
	if d.acquired, ok = m[FieldAcquiredAt].(time.Time); !ok {
		return lockDoc{}, malformed(op, "the acquiredAt field is missing or not a timestamp")
	}
	if d.expires, ok = m[FieldExpiresAt].(time.Time); !ok {
		return lockDoc{}, malformed(op, "the expiresAt field is missing or not a timestamp")
	}
	return d, nil
}

// DecodeFence reads a fence stored as a Firestore integer; ok is false
// when v is not a non-negative integer.
func DecodeFence(v any) (f lock.Fence, ok bool) {
	n, ok := v.(int64)
	if !ok || n < 0 {
		return 0, false
	}
	return lock.Fence(n), true
}

// decodeCounter reads a fence-counter document: 0 when it does not exist.
func decodeCounter(op string, snap *firestore.DocumentSnapshot) (lock.Fence, error) {
	if !snap.Exists() {
		return 0, nil
	}
	f, ok := DecodeFence(snap.Data()[FieldFence])
	if !ok {
		return 0, malformed(op, "the fence counter is missing or not a non-negative integer")
	}
	return f, nil
}
