package fingerprint

import "strconv"

// isShortDecimal reports whether lit, a JSON number with a fraction and no
// exponent whose integer part is lit[:intEnd], already is its own ECMAScript
// form. That holds when it has at most 15 significant digits (so its digits
// are the shortest that round-trip to the double nearest to it: no other
// decimal of 15 digits or fewer maps to that double), no trailing zero in the
// fraction, and a magnitude of at least 1e-6 (fewer than six zeros after
// "0."). Such numbers then print in plain decimal notation, as written.
func isShortDecimal(lit []byte, intEnd int) bool {
	if lit[len(lit)-1] == '0' {
		return false
	}
	intPart := lit[:intEnd]
	if intPart[0] == '-' {
		intPart = intPart[1:]
	}
	frac := lit[intEnd+1:]
	if len(intPart) == 1 && intPart[0] == '0' {
		zeros := 0
		for zeros < len(frac) && frac[zeros] == '0' {
			zeros++
		}
		return zeros <= 5 && len(frac)-zeros <= 15
	}
	return len(intPart)+len(frac) <= 15
}

// appendNumber appends f, a finite double, in the form of ECMAScript's
// Number.prototype.toString (ECMA-262, Number::toString): the shortest
// digits that round-trip, plain notation for 1e-6 <= |f| < 1e21 and
// exponent notation ("1e+21", "1.5e-7") outside, and 0 for -0.
func appendNumber(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0')
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// 'e' with the shortest precision gives "d.ddde±XX" or "de±XX".
	var tmp [32]byte
	e := strconv.AppendFloat(tmp[:0], f, 'e', -1, 64)
	var digits [24]byte
	k := 0
	i := 0
	for ; e[i] != 'e'; i++ {
		if e[i] != '.' {
			digits[k] = e[i]
			k++
		}
	}
	exp, _ := strconv.Atoi(string(e[i+1:]))
	d := digits[:k]
	// ECMA-262 names: the value is 0.d × 10^n, with k digits.
	n := exp + 1
	switch {
	case k <= n && n <= 21:
		dst = append(dst, d...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, d[:n]...)
		dst = append(dst, '.')
		dst = append(dst, d[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, d...)
	default:
		dst = append(dst, d[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, d[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}
