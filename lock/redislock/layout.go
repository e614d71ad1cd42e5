package redislock

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// DefaultKeyPrefix is the key prefix of [New] and [NewLayout] when none is
// given.
const DefaultKeyPrefix = "idemkit"

// MaxKeyPrefixBytes is the longest key prefix accepted.
const MaxKeyPrefixBytes = 64

// The kinds of name in the layout: the letter after the hash tag.
const (
	kindLock   = "l" // a lock record
	kindFence  = "f" // a fence counter
	kindIndex  = "i" // an id → lock name hint
	kindRecord = "r" // a co-located store's record
)

// lockHeader is the size of a lock record before its key: the id (22
// bytes), then the fence, the acquired-at and the expires-at times in
// milliseconds, 15 zero-padded decimal digits each.
const lockHeader = lock.IDLen + 3*15

// Layout names every Redis key the lock layer (and a store co-located with
// it) uses under one key prefix. Every name has the form
//
//	<prefix>:{<tag>}:<kind>:<part>
//
// where the braces form a Redis hash tag, so that all names of one user key
// (its lock record, its fence counter, a co-located store's record) share a
// cluster slot. See the package documentation for the rules.
//
// A Layout is a small comparable value; the zero Layout is not usable
// (build one with [NewLayout]).
type Layout struct {
	prefix string
}

// NewLayout returns the layout under prefix. The prefix must have 1 to
// [MaxKeyPrefixBytes] bytes of printable ASCII other than '{' and '}' (so
// that the hash tag of every name is the one the layout puts there);
// anything else is an InvalidArgument error.
func NewLayout(prefix string) (Layout, error) {
	if prefix == "" || len(prefix) > MaxKeyPrefixBytes {
		return Layout{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", fmt.Sprintf("key prefix must have 1 to %d bytes", MaxKeyPrefixBytes), nil)
	}
	for i := 0; i < len(prefix); i++ {
		if c := prefix[i]; c <= ' ' || c > '~' || c == '{' || c == '}' {
			return Layout{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "key prefix must be printable ASCII without spaces or braces", nil)
		}
	}
	return Layout{prefix: prefix}, nil
}

// Prefix returns the layout's key prefix.
func (y Layout) Prefix() string { return y.prefix }

// Lock returns the name of the lock record of key, which must be normalised
// ([lock.NormalizeKey]).
func (y Layout) Lock(key string) string { return y.keyed(kindLock, key) }

// Fence returns the name of the fence counter of key, which must be
// normalised ([lock.NormalizeKey]).
func (y Layout) Fence(key string) string { return y.keyed(kindFence, key) }

// Record returns the name of a co-located store's record under key. The
// key is used exactly as given (stores do not normalise their keys).
func (y Layout) Record(key string) string { return y.keyed(kindRecord, key) }

// Index returns the name of the index entry of the lock id id: a hint that
// names the lock record the id was issued for. Its hash tag is the id
// itself, so index entries spread over the cluster.
func (y Layout) Index(id string) string {
	return y.prefix + ":{" + id + "}:" + kindIndex
}

// isLock reports whether name is a lock record's name in this layout: the
// only names an index entry may point to.
func (y Layout) isLock(name string) bool {
	p := y.prefix + ":{"
	if len(name) <= len(p) || name[:len(p)] != p {
		return false
	}
	tag, ok := HashTag(name)
	if !ok {
		return false
	}
	rest := name[len(p)+len(tag):]
	return len(rest) > 5 && rest[:4] == "}:"+kindLock+":"
}

// keyed builds the name of kind for key: the tag, then the storage form of
// the key.
func (y Layout) keyed(kind, key string) string {
	return y.prefix + ":{" + Tag(key) + "}:" + kind + ":" + lock.StorageKey(key, 0, verbatim)
}

// Tag returns the hash tag of the names of key. If key itself contains a
// Redis hash tag ([HashTag]), it is that tag, so that "ns:lock:{X}" and
// "ns:record:{X}" (the guard's lock and record keys) land on one cluster
// slot. Otherwise it is a digest of the key: 16 characters of unpadded
// base64url of its SHA-256, which spreads keys over the slots.
//
// The tag only chooses the slot; names stay distinct for distinct keys
// whatever their tags, because the whole key follows the tag.
func Tag(key string) string {
	if t, ok := HashTag(key); ok {
		return t
	}
	sum := sha256.Sum256([]byte(key))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

// HashTag returns the hash tag of a Redis key as Redis Cluster defines it:
// the bytes between the first '{' and the first '}' after it, if that is
// not empty. ok is false when the key has no such tag (Redis then hashes
// the whole key).
func HashTag(key string) (tag string, ok bool) {
	for s := 0; s < len(key); s++ {
		if key[s] != '{' {
			continue
		}
		for e := s + 1; e < len(key); e++ {
			if key[e] == '}' {
				if e == s+1 {
					return "", false
				}
				return key[s+1 : e], true
			}
		}
		return "", false
	}
	return "", false
}

// verbatim accepts keys that are kept as they are in names: printable ASCII
// (space included) without braces. Anything else is hashed by
// lock.StorageKey, so no brace follows a name's hash tag.
func verbatim(key string) bool {
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < ' ' || c > '~' || c == '{' || c == '}' {
			return false
		}
	}
	return true
}
