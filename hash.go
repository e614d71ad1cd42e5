package idemkit

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"
)

// A Hasher turns a key or lock id into an identifier that can appear in
// lookups, telemetry and logs without revealing the raw value.
type Hasher interface {
	Hash(s string) string
}

// HasherFunc adapts a function to [Hasher].
type HasherFunc func(s string) string

// Hash calls f(s).
func (f HasherFunc) Hash(s string) string { return f(s) }

// hmacHasher hashes with HMAC-SHA-256 under a secret. Its MACs are
// reused (Reset restores the keyed state), so a hash costs one allocation:
// the string it returns.
type hmacHasher struct {
	secret []byte
	macs   sync.Pool // of *hmacState
}

type hmacState struct {
	mac hash.Hash
	in  []byte
	sum [sha256.Size]byte
}

// NewHMACHasher returns a Hasher that hashes with HMAC-SHA-256 keyed by
// secret, which should hold at least 16 random bytes, and returns the first
// 12 bytes of the MAC as 24 lowercase hex characters. Processes that share
// the secret produce the same hashes, so events from several nodes can be
// correlated; without the secret a hash cannot be reversed by guessing
// short keys. The secret is copied.
func NewHMACHasher(secret []byte) Hasher {
	return &hmacHasher{secret: append([]byte(nil), secret...)}
}

// Hash returns the keyed hash of s as 24 hex characters.
func (h *hmacHasher) Hash(s string) string {
	st, _ := h.macs.Get().(*hmacState)
	if st == nil {
		st = &hmacState{mac: hmac.New(sha256.New, h.secret)}
	} else {
		st.mac.Reset()
	}
	st.in = append(st.in[:0], s...)
	st.mac.Write(st.in)
	var out [24]byte
	hex.Encode(out[:], st.mac.Sum(st.sum[:0])[:12])
	if cap(st.in) <= 4096 {
		h.macs.Put(st)
	}
	return string(out[:])
}

// processHasher is the default hasher: HMAC-SHA-256 under a secret drawn
// from crypto/rand when the process starts. It never changes afterwards, so
// hashes are stable within one process and meaningless outside it. Use
// [NewHMACHasher] with a shared secret (for example through lock's
// WithHasher) to correlate across processes.
var processHasher = func() Hasher {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return NewHMACHasher(b[:])
}()

// DefaultHasher returns the process-wide default hasher: HMAC-SHA-256 under a
// random secret drawn once per process.
func DefaultHasher() Hasher { return processHasher }
