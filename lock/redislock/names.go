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
//	<prefix>:{<tag>}:l:<part>   the lock record of a key
//	<prefix>:{<id>}:i           the index hint of a lock id
//
// (see the package documentation). The names are those of earlier
// versions, so that processes of both versions exclude each other during
// an upgrade.
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
	return n.prefix + ":{" + tag(key) + "}:l:" + storageKey(key)
}

// index returns the name of the index hint of the lock id id. Its hash tag
// is the id, so hints spread over a cluster's slots.
func (n names) index(id string) string {
	return n.prefix + ":{" + id + "}:i"
}

// isLock reports whether name is a lock record's name under n: the only
// names an index hint may point to.
func (n names) isLock(name string) bool {
	p := n.prefix + ":{"
	if len(name) <= len(p) || name[:len(p)] != p {
		return false
	}
	t, ok := hashTag(name)
	if !ok {
		return false
	}
	rest := name[len(p)+len(t):]
	return len(rest) > 5 && rest[:4] == "}:l:"
}

// tag returns the hash tag of the lock record of key: the key's own Redis
// hash tag when it has one, else 16 characters of unpadded base64url of
// its SHA-256, which spreads keys over a cluster's slots. The tag only
// chooses the slot; the whole key (or its hash) follows it, so distinct
// keys never share a name.
func tag(key string) string {
	if t, ok := hashTag(key); ok {
		return t
	}
	sum := sha256.Sum256([]byte(key))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
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

// storageKey is the part of a lock record's name that stands for key:
// "k:" and the key itself when it is printable ASCII (space included)
// without braces, so that no brace follows the name's hash tag; otherwise
// "h:" and the unpadded base64url SHA-256 of the key.
func storageKey(key string) string {
	if verbatim(key) {
		return "k:" + key
	}
	sum := sha256.Sum256([]byte(key))
	return "h:" + base64.RawURLEncoding.EncodeToString(sum[:])
}

func verbatim(key string) bool {
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < ' ' || c > '~' || c == '{' || c == '}' {
			return false
		}
	}
	return true
}
