package fingerprint_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/fingerprint"
)

// digits400 is a 400-digit integer that does not end in 0.
var digits400 = func() string {
	var sb strings.Builder
	for i := range 400 {
		sb.WriteByte(byte('1' + (i*7+i/9)%9))
	}
	return sb.String()
}()

// canonicalNumber returns the canonical form of the JSON number lit.
func canonicalNumber(t *testing.T, lit string) string {
	t.Helper()
	out, err := fingerprint.CanonicalJSON([]byte(lit))
	if err != nil {
		t.Fatalf("CanonicalJSON(%.60q): %v", lit, err)
	}
	return string(out)
}

// TestCanonicalNumbersEqual checks that every spelling of a value has the
// value's canonical form.
func TestCanonicalNumbersEqual(t *testing.T) {
	tests := []struct {
		want string
		lits []string
	}{
		{"100", []string{"100", "1e2", "1E2", "100.0", "1.00e+2", "10000e-2", "0.1e3", "100e0", "1e002", "100.000",
			"0.00000000000000000001e22", "100000000000000000000000000000e-27"}},
		{"-100", []string{"-100", "-1e2", "-100.0", "-1.00E+2", "-10000e-2"}},
		{"0", []string{"0", "-0", "0.0", "-0.0", "0e5", "0E+0", "-0e-5", "0.000", "0e1000000001",
			"0.000e999999999999999999999", "-0.0E-99999999999999999999"}},
		{"19.99", []string{"19.99", "19.990", "1999e-2", "1.999e1", "0.1999E+2", "19990000000000000000e-18"}},
		{"19.990000000000000001", []string{"19.990000000000000001", "1999.0000000000000001e-2", "19990000000000000001e-18"}},
		{"100.000000000000001", []string{"100.000000000000001", "1.00000000000000001e2", "100000000000000001e-15"}},
		{"-12.5", []string{"-12.5", "-12.50", "-1.25e1", "-125e-1", "-0.125E2"}},
		{"0.5", []string{"0.5", "5e-1", "0.50", "50e-2"}},
		{"0.000001", []string{"0.000001", "1e-6", "0.0000010", "10e-7"}},
		{"-0.0000123", []string{"-0.0000123", "-1.23e-5", "-123e-7"}},
		{"1e-7", []string{"1e-7", "0.0000001", "0.10e-6", "1E-07"}},
		{"1.5e-7", []string{"1.5e-7", "0.00000015", "15e-8"}},
		{"100000000000000000000", []string{"100000000000000000000", "1e20", "100000000000000000000.0"}},
		{"1e+21", []string{"1e21", "1000000000000000000000", "10e20", "1.0e21", "1e+21"}},
		{"12300000000000000000000", []string{"12300000000000000000000", "123e20", "1.23e22"}},
		{"1.23e+25", []string{"1.23e25", "12300000000000000000000000", "123e23"}},
		{"12345678901234567891", []string{"12345678901234567891", "1.2345678901234567891e19", "12345678901234567891.000"}},
		{"-98765432109876543210", []string{"-98765432109876543210", "-9876543210987654321e1"}},
		{"9007199254740993", []string{"9007199254740993", "9007199254740993.0", "9.007199254740993e15"}},
		{"1e+400", []string{"1e400", "1" + strings.Repeat("0", 400), "10e399", "0.1e401"}},
		{"-1.5e+309", []string{"-1.5e309", "-15e308", "-0.000015e314"}},
		{"1e-400", []string{"1e-400", "0.1e-399", "10e-401", "0." + strings.Repeat("0", 399) + "1"}},
		{"1.7976931348623157e+308", []string{"1.7976931348623157e308", "17976931348623157e292"}},
		{"5e-324", []string{"5e-324", "50e-325"}},
		{"1e+1000000000", []string{"1e1000000000", "10e999999999", "0.0001e1000000004"}},
		{"1e-1000000000", []string{"1e-1000000000", "0.1e-999999999", "100e-1000000002"}},
		{"1e+999999999", []string{"1e999999999", "1e0000000000999999999"}},
		// A 400-digit mantissa, as an integer, with a point and in
		// exponent form.
		{digits400, []string{digits400, digits400 + ".000", digits400[:200] + "." + digits400[200:] + "e200",
			"0." + digits400 + "e400", digits400 + "0000e-4"}},
		{"0." + digits400, []string{"0." + digits400, digits400 + "e-400", "0.00" + digits400 + "e2"}},
		{digits400[:150] + "." + digits400[150:], []string{digits400 + "e-250", "0.0" + digits400 + "e151"}},
		{digits400[:1] + "." + digits400[1:] + "e+999999399", []string{digits400 + "e999999000"}},
		{"-" + digits400[:1] + "." + digits400[1:] + "e-1000", []string{"-" + digits400 + "e-1399", "-0." + digits400 + "e-999"}},
	}
	for _, tt := range tests {
		for _, lit := range tt.lits {
			if got := canonicalNumber(t, lit); got != tt.want {
				t.Errorf("CanonicalJSON(%.60q) = %.60q, want %.60q", lit, got, tt.want)
			}
		}
		if got := canonicalNumber(t, tt.want); got != tt.want {
			t.Errorf("CanonicalJSON(%.60q) = %.60q, not idempotent", tt.want, got)
		}
	}
}

// TestCanonicalNumbersDiffer checks that numbers of different values keep
// different canonical forms, however close the values.
func TestCanonicalNumbersDiffer(t *testing.T) {
	changed := []byte(digits400)
	changed[399]++
	tests := [][2]string{
		{"100.000000000000001", "100"},
		{"19.990000000000000001", "19.99"},
		{"19.99", "19.989999999999998436805981327779591083526611328125"}, // the double nearest to 19.99
		{"0.1", "0.1000000000000000055511151231257827021181583404541015625"},
		{"9007199254740993", "9007199254740992"},
		{"9007199254740993.0", "9007199254740992"},
		{"12345678901234567890", "12345678901234567891"},
		{"1.2345678901234567891e19", "12345678901234567890"},
		{"1000000000000000000001", "1e21"},
		{"1e400", "1e401"},
		{"1e400", "1e399"},
		{"1e-400", "0"},
		{"5e-324", "0"},
		{"1e-1000000000", "0"},
		{"-1", "1"},
		{"-0.5", "0.5"},
		{"1e21", "100000000000000000000"},
		{digits400, string(changed)},
		{digits400 + "e5", digits400 + "e6"},
		{"1" + strings.Repeat("0", 400), "1" + strings.Repeat("0", 399) + "1"},
	}
	for _, tt := range tests {
		a, b := canonicalNumber(t, tt[0]), canonicalNumber(t, tt[1])
		if a == b {
			t.Errorf("CanonicalJSON(%.60q) = CanonicalJSON(%.60q) = %.60q", tt[0], tt[1], a)
		}
		fa, err1 := fingerprint.JSON([]byte(`{"amount":` + tt[0] + `}`))
		fb, err2 := fingerprint.JSON([]byte(`{"amount":` + tt[1] + `}`))
		if err1 != nil || err2 != nil || fa == fb {
			t.Errorf("JSON fingerprints of amounts %.60q and %.60q: %v, %v, %v, %v", tt[0], tt[1], fa, fb, err1, err2)
		}
	}
}

// TestCanonicalIntegersKeepDigits checks that integer literals are kept
// exactly as written, unless they end in more than 20 zeros.
func TestCanonicalIntegersKeepDigits(t *testing.T) {
	for _, lit := range []string{
		"0", "1", "-1", "7", "10", "1250", "-1000000", "9007199254740992", "9007199254740993",
		"18446744073709551615", "18446744073709551616", "12345678901234567890", "-98765432109876543210",
		"100000000000000000000", "-100000000000000000000", "12300000000000000000000",
		"1" + strings.Repeat("0", 20), "7" + strings.Repeat("3", 50) + strings.Repeat("0", 20),
		digits400, "-" + digits400, digits400 + strings.Repeat("0", 20),
	} {
		if got := canonicalNumber(t, lit); got != lit {
			t.Errorf("CanonicalJSON(%.60q) = %.60q, want the literal", lit, got)
		}
	}
	for lit, want := range map[string]string{
		"-0":                          "0",
		"1" + strings.Repeat("0", 21): "1e+21",
		"-" + digits400 + strings.Repeat("0", 21): "-" + digits400[:1] + "." + digits400[1:] + "e+420",
	} {
		if got := canonicalNumber(t, lit); got != want {
			t.Errorf("CanonicalJSON(%.60q) = %.60q, want %.60q", lit, got, want)
		}
	}
}

// TestCanonicalNumbersOutputBounded checks that a huge exponent never
// expands: the canonical form of a number is at most 21 bytes longer than
// the literal.
func TestCanonicalNumbersOutputBounded(t *testing.T) {
	for _, lit := range []string{"1e999999999", "-1e-999999999", "1e20", "1e21", "1e-6", "1e-7", "9e1000000000",
		"0.000001e-999999994", digits400 + "e999999000", "1e" + strings.Repeat("0", 1000) + "5"} {
		got := canonicalNumber(t, lit)
		if len(got) > len(lit)+21 {
			t.Errorf("CanonicalJSON(%.60q) is %d bytes long", lit, len(got))
		}
	}
	in := "[" + strings.Repeat("1e999999999,", 100000) + "0]"
	out, err := fingerprint.CanonicalJSON([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) > 2*len(in) {
		t.Errorf("canonical form of %d bytes for %d bytes of input", len(out), len(in))
	}
}

// TestCanonicalNumbersRefused checks the bound on exponents.
func TestCanonicalNumbersRefused(t *testing.T) {
	for _, lit := range []string{
		"1e1000000001", "-1e1000000001", "1e-1000000001", "10e1000000000", "0.01e-999999999",
		"9.99e1000000001", "1e99999999999999999999", "1e-99999999999999999999", digits400 + "e999999700",
	} {
		_, err := fingerprint.CanonicalJSON([]byte(lit))
		var se *fingerprint.SyntaxError
		if !errors.Is(err, fingerprint.ErrInvalidJSON) || !errors.As(err, &se) || se.Offset != 0 {
			t.Errorf("CanonicalJSON(%.60q) error = %v, want a *SyntaxError at offset 0", lit, err)
			continue
		}
		if !strings.Contains(se.Msg, "out of range") || !strings.Contains(se.Msg, "1000000000") {
			t.Errorf("CanonicalJSON(%.60q) error message %q does not state the bound", lit, se.Msg)
		}
	}
}
