package idemkit

import "fmt"

// Fence is a fencing token: per key, every lease gets a fence greater than
// all the key's earlier ones, through release, expiry, cleanup and restart,
// and it never wraps (the rule is stated in
// [github.com/idemkit/idemkit/store]'s package doc). A fence is at least the
// backend's clock in Unix milliseconds at the acquire, so consecutive fences
// of a key are increasing but not consecutive. A resource that records the
// highest fence it has seen and refuses writes carrying a lower one is safe
// from a holder whose lease ran out unnoticed.
//
// Its string form is 15 zero-padded decimal digits, so string order equals
// numeric order; [ParseFence] reverses it.
type Fence uint64

// Fence limits. A backend warns (through its logger, never printing the raw
// key) when it issues a fence above FenceWarn, and refuses to issue one above
// FenceMax, atomically: the acquire fails with Internal and nothing is
// written.
const (
	FenceWarn Fence = 90_000_000_000_000  // 9×10^13
	FenceMax  Fence = 900_000_000_000_000 // 9×10^14
)

// FenceDigits is the width of a fence's string form.
const FenceDigits = 15

// String returns the fence as 15 zero-padded decimal digits.
func (f Fence) String() string {
	return fmt.Sprintf("%015d", uint64(f))
}

// Uint64 returns the fence as a number.
func (f Fence) Uint64() uint64 { return uint64(f) }

// Compare returns -1, 0 or +1 as f is older than, equal to or newer than g.
func (f Fence) Compare(g Fence) int {
	switch {
	case f < g:
		return -1
	case f > g:
		return 1
	}
	return 0
}

// ParseFence parses the 15-digit string form of a fence. Anything else
// (another length, a sign, a non-digit) is an InvalidArgument error.
func ParseFence(s string) (Fence, error) {
	if len(s) != FenceDigits {
		return 0, NewError(CodeInvalidArgument, "parse-fence", fmt.Sprintf("fence must be %d digits (got %d bytes)", FenceDigits, len(s)), nil)
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, NewError(CodeInvalidArgument, "parse-fence", "fence must be decimal digits", nil)
		}
		v = v*10 + uint64(c-'0')
	}
	return Fence(v), nil
}

// MarshalText implements encoding.TextMarshaler with the 15-digit form.
func (f Fence) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with [ParseFence].
func (f *Fence) UnmarshalText(b []byte) error {
	v, err := ParseFence(string(b))
	if err != nil {
		return err
	}
	*f = v
	return nil
}
