package fingerprint

import "strconv"

// Numbers are canonicalised by their exact decimal value. A nonzero value is
// ±D × 10^E with D an integer of k digits that does not end in 0, or
// equally ±0.D × 10^n with n = k + E; its canonical form is, by the first
// case that applies:
//
//   - an integer (E >= 0) ending in at most maxPlainZeros zeros: D followed
//     by E zeros ("100", "12345678901234567890");
//   - a non-integer of magnitude 1 or more (E < 0 < n): the first n digits of
//     D, a point and the others ("19.99", "100.000000000000001");
//   - a non-integer of magnitude at least 10^-6 (-5 <= n <= 0): "0.", -n
//     zeros and D ("0.5", "0.000001");
//   - anything else in exponent form: the first digit of D, then a point
//     and the other digits if there are any, then 'e', the sign of the
//     exponent n-1 ('+' or '-') and its decimal digits ("1e+21", "1e-7",
//     "1.5e+400").
//
// Zero, however written (-0, 0.0, 0e5), is "0". The form is a function of
// the value alone and reads back as that value, so two literals have the
// same form exactly when they denote the same number. It is at most
// maxPlainZeros+1 bytes longer than D, whose digits all appear in the
// literal, so the canonical form of a document stays in proportion to it.

// maxPlainZeros is the number of trailing zeros up to which an integer is
// written out in full: every integer below 10^21 is, and so is every
// integer literal, however many digits it has, unless it ends in more.
const maxPlainZeros = 20

// maxExponent bounds the exponent of the numbers the canonical form accepts:
// written as d.ddd × 10^X, a nonzero number must have |X| <= maxExponent.
// The bound keeps exponents to ten digits; it does not bound the output,
// which exponent form keeps in proportion to the input whatever X is.
const maxExponent = 1_000_000_000

// exponentSaturation stands for the value of a literal exponent of more
// than 18 significant digits: far beyond maxExponent, yet far from
// overflowing an int64 once the position of the decimal point is added.
const exponentSaturation = 1_000_000_000_000_000_000

// plainDecimal reports whether lit, a JSON number with a fraction and no
// exponent whose integer part is lit[:intEnd], already is its canonical
// form: its fraction does not end in 0 and, if its integer part is 0, at
// most five zeros follow the point. Such a number is "D[:n].D[n:]" or
// "0.000D" as written.
func plainDecimal(lit []byte, intEnd int) bool {
	if lit[len(lit)-1] == '0' {
		return false
	}
	intPart := lit[:intEnd]
	if intPart[0] == '-' {
		intPart = intPart[1:]
	}
	if len(intPart) > 1 || intPart[0] != '0' {
		return true
	}
	frac := lit[intEnd+1:]
	zeros := 0
	for zeros < len(frac) && frac[zeros] == '0' {
		zeros++
	}
	return zeros <= 5
}

// parseExponent returns the value of the exponent of a JSON number, an
// optional sign and one or more digits, saturated at ±exponentSaturation.
func parseExponent(b []byte) int64 {
	neg := false
	switch b[0] {
	case '-':
		neg = true
		fallthrough
	case '+':
		b = b[1:]
	}
	for len(b) > 1 && b[0] == '0' {
		b = b[1:]
	}
	x := int64(exponentSaturation)
	if len(b) <= 18 {
		x = 0
		for _, ch := range b {
			x = x*10 + int64(ch-'0')
		}
	}
	if neg {
		return -x
	}
	return x
}

// appendDecimal appends the canonical form of the number
// ±<ip>.<fp> × 10^exp, where ip and fp are strings of decimal digits (fp
// possibly empty) and exp is saturated as parseExponent does. It reports
// false, appending nothing, for a nonzero number whose exponent in
// d.ddd × 10^X form is beyond ±maxExponent.
func appendDecimal(dst []byte, neg bool, ip, fp []byte, exp int64) ([]byte, bool) {
	// The digits are m = ip+fp, the point between them; D is m[f:l+1].
	f := 0
	for f < len(ip) && ip[f] == '0' {
		f++
	}
	if f == len(ip) {
		for f-len(ip) < len(fp) && fp[f-len(ip)] == '0' {
			f++
		}
		if f-len(ip) == len(fp) {
			return append(dst, '0'), true // zero, however written
		}
	}
	l := len(ip) + len(fp) - 1
	for l >= len(ip) && fp[l-len(ip)] == '0' {
		l--
	}
	if l < len(ip) {
		for ip[l] == '0' {
			l--
		}
	}
	k := l - f + 1
	x := exp + int64(len(ip)-1-f) // the exponent X of d.ddd × 10^X
	if x > maxExponent || x < -maxExponent {
		return dst, false
	}
	n := int(x) + 1 // |n| <= maxExponent+1: an int even on 32-bit platforms
	e := n - k
	if neg {
		dst = append(dst, '-')
	}
	switch {
	case 0 <= e && e <= maxPlainZeros:
		dst = appendDigits(dst, ip, fp, f, l+1)
		for range e {
			dst = append(dst, '0')
		}
	case e < 0 && n > 0:
		dst = appendDigits(dst, ip, fp, f, f+n)
		dst = append(dst, '.')
		dst = appendDigits(dst, ip, fp, f+n, l+1)
	case e < 0 && -5 <= n:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = appendDigits(dst, ip, fp, f, l+1)
	default:
		dst = appendDigits(dst, ip, fp, f, f+1)
		if k > 1 {
			dst = append(dst, '.')
			dst = appendDigits(dst, ip, fp, f+1, l+1)
		}
		if x < 0 {
			dst = append(dst, 'e', '-')
			x = -x
		} else {
			dst = append(dst, 'e', '+')
		}
		dst = strconv.AppendInt(dst, x, 10)
	}
	return dst, true
}

// appendDigits appends m[from:to] to dst, where m is ip followed by fp.
func appendDigits(dst, ip, fp []byte, from, to int) []byte {
	if from < len(ip) {
		dst = append(dst, ip[from:min(to, len(ip))]...)
		from = len(ip)
	}
	if to > from {
		dst = append(dst, fp[from-len(ip):to-len(ip)]...)
	}
	return dst
}
