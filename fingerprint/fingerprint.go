package fingerprint

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Algorithm names of the fingerprints this package computes. Any change to
// what they hash takes a new name, so that stored fingerprints become
// incomparable rather than mismatches ("-v2" replaced "-v1", which rounded
// numbers to a double).
const (
	algHTTP = "http-v2" // [HTTP]
	algJSON = "json-v2" // [Value] and [JSON]
)

// maxAlgLen is the longest algorithm name a [Fingerprint] may carry.
const maxAlgLen = 32

// ErrInvalidFingerprint is matched (with errors.Is) by every error of [Parse],
// [Fingerprint.UnmarshalText] and [Fingerprint.MarshalText].
var ErrInvalidFingerprint = errors.New("fingerprint: invalid fingerprint")

// Fingerprint identifies what a request asks for: an algorithm name and a
// SHA-256 digest. The zero value means "no fingerprint". It is comparable,
// safe to copy and to use as a map key.
type Fingerprint struct {
	alg string
	sum [32]byte
}

// New returns the fingerprint with algorithm alg (1 to 32 characters of
// [a-z0-9.-], not validated here: another does not [Parse]) and digest
// sum; an empty alg yields the zero Fingerprint.
func New(alg string, sum [32]byte) Fingerprint {
	if alg == "" {
		return Fingerprint{}
	}
	return Fingerprint{alg: alg, sum: sum}
}

// Alg returns the algorithm name, such as "http-v2" or "json-v2"; "" for the
// zero value.
func (f Fingerprint) Alg() string { return f.alg }

// Sum returns the SHA-256 digest (all zeros for the zero value).
func (f Fingerprint) Sum() [32]byte { return f.sum }

// IsZero reports whether f is the zero value, which carries no algorithm.
func (f Fingerprint) IsZero() bool { return f.alg == "" }

// String returns "<alg>:<digest as 64 lowercase hex digits>", or "" for the
// zero value. [Parse] is its inverse.
func (f Fingerprint) String() string {
	if f.IsZero() {
		return ""
	}
	var buf [maxAlgLen + 1 + 2*len(f.sum)]byte // on the stack: one allocation, the string
	return string(f.appendText(buf[:0]))
}

func (f Fingerprint) appendText(b []byte) []byte {
	b = append(b, f.alg...)
	b = append(b, ':')
	return hex.AppendEncode(b, f.sum[:])
}

// Compare reports whether f and g are known to fingerprint the same
// request. comparable is false when either is zero or their algorithms are
// versions of one family ("http-v1", "http-v2"): callers treat such a pair
// as matching, so an upgrade never looks like another request. Different
// families ("http-v2", "grpc-v1") are comparable and never the same.
func (f Fingerprint) Compare(g Fingerprint) (same, comparable bool) {
	if f.IsZero() || g.IsZero() {
		return false, false
	}
	if f.alg != g.alg {
		return false, family(f.alg) != family(g.alg)
	}
	return f.sum == g.sum, true
}

// family returns alg without a final "-v" followed by digits.
func family(alg string) string {
	i := len(alg)
	for i > 0 && alg[i-1] >= '0' && alg[i-1] <= '9' {
		i--
	}
	if i < len(alg) && i >= 2 && alg[i-2:i] == "-v" {
		return alg[:i-2]
	}
	return alg
}

// Parse is the inverse of [Fingerprint.String]; anything else, "" included,
// is an error matching [ErrInvalidFingerprint].
func Parse(s string) (Fingerprint, error) {
	alg, hexSum, ok := strings.Cut(s, ":")
	if !ok {
		return Fingerprint{}, invalid(s, "missing ':'")
	}
	if !validAlg(alg) {
		return Fingerprint{}, invalid(s, "algorithm must be 1 to 32 characters of [a-z0-9.-]")
	}
	var f Fingerprint
	if len(hexSum) != 2*len(f.sum) {
		return Fingerprint{}, invalid(s, "digest must be 64 lowercase hex digits")
	}
	for i := 0; i < len(hexSum); i += 2 {
		hi, ok1 := lowerHex(hexSum[i])
		lo, ok2 := lowerHex(hexSum[i+1])
		if !ok1 || !ok2 {
			return Fingerprint{}, invalid(s, "digest must be 64 lowercase hex digits")
		}
		f.sum[i/2] = hi<<4 | lo
	}
	f.alg = alg
	return f, nil
}

// MarshalText implements [encoding.TextMarshaler] with the form of
// [Fingerprint.String]. The zero value marshals to empty text; a fingerprint
// whose algorithm name [Parse] would refuse is an error matching
// [ErrInvalidFingerprint], so nothing unreadable is ever stored.
func (f Fingerprint) MarshalText() ([]byte, error) {
	if f.IsZero() {
		return []byte{}, nil
	}
	if !validAlg(f.alg) {
		return nil, fmt.Errorf("%w: algorithm must be 1 to 32 characters of [a-z0-9.-]", ErrInvalidFingerprint)
	}
	return f.appendText(make([]byte, 0, len(f.alg)+1+2*len(f.sum))), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler]. Empty text yields the
// zero value (so a zero Fingerprint survives a round trip through
// MarshalText); anything else must be accepted by [Parse].
func (f *Fingerprint) UnmarshalText(text []byte) error {
	if len(text) == 0 {
		*f = Fingerprint{}
		return nil
	}
	g, err := Parse(string(text))
	if err != nil {
		return err
	}
	*f = g
	return nil
}

func validAlg(alg string) bool {
	if len(alg) == 0 || len(alg) > maxAlgLen {
		return false
	}
	for i := 0; i < len(alg); i++ {
		c := alg[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// invalid builds a Parse error quoting at most a short excerpt of s.
func invalid(s, why string) error {
	return fmt.Errorf("%w %q: %s", ErrInvalidFingerprint, excerpt(s), why)
}

// excerpt returns at most the first 24 bytes of s, marked when cut.
func excerpt(s string) string {
	const max = 24
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
