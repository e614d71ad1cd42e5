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

// bindingLabel keys the hashes of bound credentials without a secret.
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

// bindingKey returns the key of the credential hashes: the label, or its
// HMAC under the secret, so they never share a key with event hashes.
func bindingKey(secret []byte) []byte {
	if secret == nil {
		return []byte(bindingLabel)
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(bindingLabel))
	return m.Sum(nil)
}

// binder computes credential bindings with an HMAC keyed once; the guard
// pools them, so a bound call allocates nothing for its binding.
type binder struct {
	mac hash.Hash
	msg []byte
	sum [sha256.Size]byte
}

// appendBinding appends the binding of values for recordKey: the mark and
// the truncated HMAC in base64url (a fixed mark for no values).
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

// noCredentials is the binding of no credentials: a hash's length, of a
// character base64url never writes.
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
