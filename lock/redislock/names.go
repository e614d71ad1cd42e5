package redislock

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"

	"github.com/idemkit/idemkit"
)

// defaultKeyPrefix is the key prefix when [WithKeyPrefix] is not given.
const defaultKeyPrefix = "idemkit"

// maxKeyPrefixBytes is the longest key prefix [WithKeyPrefix] accepts.
const maxKeyPrefixBytes = 64

// names builds the Redis key names of a locker under one prefix:
//
//	<prefix>:l:<part>           the lock record of a key without a hash tag
//	<prefix>:{<tag>}:l:<part>   the lock record of a key with the hash tag <tag>
//	<prefix>:{<id>}:i           the index hint of a lock id
//
// (see the package documentation).
type names struct {
	prefix string
}

func newNames(prefix string) (names, error) {
	if prefix == "" || len(prefix) > maxKeyPrefixBytes {
		return names{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", fmt.Sprintf("the key prefix must have 1 to %d bytes", maxKeyPrefixBytes), nil)
	}
	for i := 0; i < len(prefix); i++ {
		if c := prefix[i]; c <= ' ' || c > '~' || c == '{' || c == '}' {
			return names{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "the key prefix must be printable ASCII without spaces or braces", nil)
		}
	}
	return names{prefix: prefix}, nil
}

// lock returns the name of the lock record of key, which must be
// normalised (lock.NormalizeKey).
func (n names) lock(key string) string {
	if verbatim(key) { // no braces, so no hash tag either
		return n.prefix + ":l:k:" + key
	}
	if t, ok := hashTag(key); ok {
		return n.prefix + ":{" + t + "}:l:h:" + keyHash(key)
	}
	return n.prefix + ":l:h:" + keyHash(key)
}

// keyOf returns the key that the lock record's name spells, when it does
// (a printable key without braces: the records of these keys do not store
// the key again).
func (n names) keyOf(name string) (string, bool) {
	p := n.prefix + ":l:k:"
	if len(name) <= len(p) || name[:len(p)] != p {
		return "", false
	}
	return name[len(p):], true
}

// index returns the name of the index hint of the lock id id. Its hash tag
// is the id, so hints spread over a cluster's slots.
func (n names) index(id string) string {
	return n.prefix + ":{" + id + "}:i"
}

// isLock reports whether name is a lock record's name under n: the only
// names an index hint may point to.
func (n names) isLock(name string) bool {
	if len(name) <= len(n.prefix)+1 || name[:len(n.prefix)] != n.prefix || name[len(n.prefix)] != ':' {
		return false
	}
	rest := name[len(n.prefix)+1:]
	if len(rest) > 0 && rest[0] == '{' {
		t, ok := hashTag(rest)
		if !ok {
			return false
		}
		rest = rest[len(t)+2:]
		if len(rest) == 0 || rest[0] != ':' {
			return false
		}
		rest = rest[1:]
	}
	return len(rest) > 4 && rest[:2] == "l:" && (rest[2:4] == "k:" || rest[2:4] == "h:")
}

// hashTag returns the hash tag of a Redis key as Redis Cluster defines it:
// the bytes between the first '{' and the first '}' after it, if that is
// not empty.
func hashTag(key string) (string, bool) {
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

// keyHash stands for a key that is not printable ASCII (space included)
// without braces in its lock record's name, after "h:": the unpadded
// base64url SHA-256 of the key. Other keys stand for themselves, after
// "k:", so no brace follows the name's hash tag.
func keyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func verbatim(key string) bool {
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < ' ' || c > '~' || c == '{' || c == '}' {
			return false
		}
	}
	return true
}
