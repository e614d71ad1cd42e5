package middleware

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"strings"

	"github.com/idemkit/idemkit/fingerprint"
)

// bindingLabel keys the hashes of bound credentials when the guard has no
// secret (see [WithSecret]); with a secret, the key is the HMAC-SHA-256 of
// this label under the secret.
const bindingLabel = "idemkit credential binding v1"

// bindingMark separates a stored fingerprint from the binding of the
// credentials that wrote it. A fingerprint's string form never holds a ';'.
const bindingMark = ";c="

// bindingBytes is how many bytes of the HMAC a record keeps: 192 bits,
// 32 base64url characters.
const bindingBytes = 24

// Credentials binds the call's record to the caller's raw credentials
// (compared as an ordered list): a record written with other credentials,
// or none, is never replayed to this call nor runs fn again; the call
// fails with [ErrCredentialsMismatch] before the payloads are compared.
// The record keeps only 24 bytes of an HMAC-SHA-256 over the record key
// and the values, keyed by the guard's secret ([WithSecret]).
// Credentials() binds the call to having none; without the option a call
// is not bound.
func Credentials(values ...string) CallOption { return CallOption{set: setCredentials, list: values} }

func setCredentials(c *callConfig, o CallOption) { c.credentials, c.bound = o.list, true }

// bindingKey returns the key of the credential hashes: the label itself
// without a secret, else the HMAC-SHA-256 of the label under the secret,
// so that these hashes never share a key with the hashes of keys in
// events.
func bindingKey(secret []byte) []byte {
	if secret == nil {
		return []byte(bindingLabel)
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(bindingLabel))
	return m.Sum(nil)
}

// binder computes credential bindings: an HMAC keyed once, reset for each
// use, and a buffer for its message. The guard keeps them in a pool, so a
// bound call allocates nothing for its binding.
type binder struct {
	mac hash.Hash
	msg []byte
	sum [sha256.Size]byte
}

// appendBinding appends to b the binding of credentials values for the
// record key recordKey: the mark and the truncated HMAC in base64url.
// A call without values (no credentials at all) has nothing to hide: its
// binding is the fixed noCredentials, computed without a hash.
func (g *Guard) appendBinding(b []byte, recordKey string, values []string) []byte {
	if len(values) == 0 {
		return append(append(b, bindingMark...), noCredentials...)
	}
	bd, _ := g.binders.Get().(*binder)
	if bd == nil {
		bd = &binder{mac: hmac.New(sha256.New, g.cfg.bindingKey)}
	}
	bd.msg = appendField(bd.msg[:0], recordKey)
	for _, v := range values {
		bd.msg = appendField(bd.msg, v)
	}
	bd.mac.Reset()
	bd.mac.Write(bd.msg)
	sum := bd.mac.Sum(bd.sum[:0])[:bindingBytes]
	b = append(b, bindingMark...)
	b = base64.RawURLEncoding.AppendEncode(b, sum)
	if cap(bd.msg) <= maxPooledMessage {
		g.binders.Put(bd)
	}
	return b
}

// noCredentials is the binding of a call bound to no credentials: as long
// as a hash's, and of a character ('.') that base64url never writes, so it
// equals no hash.
const noCredentials = "................................"

// maxPooledMessage bounds the message buffer a pooled binder keeps.
const maxPooledMessage = 16 << 10

// appendField appends s to b behind its length as 4 bytes big-endian.
func appendField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// splitStored splits a stored fingerprint into the request's fingerprint
// and the binding of the credentials that wrote it ("" when none).
func splitStored(stored string) (fp, binding string) {
	if i := strings.LastIndex(stored, bindingMark); i >= 0 {
		return stored[:i], stored[i:]
	}
	return stored, ""
}

// bindingLen is the length of a binding in a stored fingerprint, its mark
// included.
const bindingLen = len(bindingMark) + (bindingBytes*8+5)/6

// appendFingerprint appends fp's string form to b (nothing for the zero
// fingerprint), as fp.String() spells it.
func appendFingerprint(b []byte, fp fingerprint.Fingerprint) []byte {
	if fp.IsZero() {
		return b
	}
	b = append(b, fp.Alg()...)
	b = append(b, ':')
	sum := fp.Sum()
	return hex.AppendEncode(b, sum[:])
}
