package fingerprint_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/fingerprint"
)

func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{
		`{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001], "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/", "literals": [null, true, false]}`,
		`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7}`,
		`[12345678901234567890, -0, 0.1, 1e21, 1e-7, 5e-324, 1.7976931348623157e308, 9007199254740993]`,
		`{"a":{"b":[{"c":"d"},{"e":"f"}]},"g":[[],{}]}`,
		`"\u2028\u2029\u0000\u001f\"\\\/"`,
		`{"a":1,"a":2}`,
		`"\ud800"`,
		`1e400`,
		"\"\xff\"",
		`[1,]`,
		` true `,
		`[[[[[[[[[[]]]]]]]]]]`,
		`0.000001234`,
		`-1.5e-7`,
		`[100.000000000000001, 100, 1e2, 1.00e+2, 10000e-2, 19.990000000000000001, -0.0, 0e5]`,
		`[1e999999999, 1e1000000001, 0.01e-999999999, 1e-400, 123e20]`,
		`{"amount":1,"Amount":1000,"a":1,"A":2,"b":0}`,
		`{"K":1,"\u212a":2,"k":3,"s":4,"\u017f":5,"S":6,"n":{"A":1,"a":2,"amount":3,"AMOUNT":4}}`,
		"{\"\u03c3\":1,\"\u03a3\":2,\"\u00df\":3,\"\u1e9e\":4,\"ss\":5,\"\u03c2\":6}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := fingerprint.CanonicalJSON(data)
		if err != nil {
			if !errors.Is(err, fingerprint.ErrInvalidJSON) {
				t.Fatalf("error %v does not match ErrInvalidJSON", err)
			}
			var se *fingerprint.SyntaxError
			if !errors.As(err, &se) || se.Offset < 0 || se.Offset > int64(len(data)) {
				t.Fatalf("error %v: want a *SyntaxError with an offset within the input", err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		if !json.Valid(out) {
			t.Fatalf("output %q is not valid JSON", out)
		}
		again, err := fingerprint.CanonicalJSON(out)
		if err != nil {
			t.Fatalf("output %q refused: %v", out, err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q -> %q", data, out, again)
		}
		var vin, vout any
		errIn := json.Unmarshal(data, &vin)
		errOut := json.Unmarshal(out, &vout)
		if (errIn == nil) != (errOut == nil) {
			t.Fatalf("encoding/json: input error %v, output error %v", errIn, errOut)
		}
		if errIn == nil && !reflect.DeepEqual(vin, vout) {
			t.Fatalf("values differ:\n in %q: %#v\nout %q: %#v", data, vin, out, vout)
		}
		// Two bodies with one canonical form read alike to a Go handler,
		// whose struct fields encoding/json matches to member names without
		// regard to case, the last match winning. data and out are such
		// a pair (out is its own canonical form); any other body with
		// this form reads as out does, so as data does.
		var sin, sout caseFields
		errIn = json.Unmarshal(data, &sin)
		errOut = json.Unmarshal(out, &sout)
		if (errIn == nil) != (errOut == nil) {
			t.Fatalf("encoding/json into a struct: input error %v, output error %v", errIn, errOut)
		}
		if !reflect.DeepEqual(sin, sout) {
			t.Fatalf("a struct reads otherwise:\n in %q: %+v\nout %q: %+v", data, sin, out, sout)
		}
		// A lone number keeps its exact value (when math/big can hold it).
		lit := bytes.TrimSpace(data)
		if len(lit) > 0 && (lit[0] == '-' || '0' <= lit[0] && lit[0] <= '9') && smallExponent(lit) {
			in, ok1 := new(big.Rat).SetString(string(lit))
			got, ok2 := new(big.Rat).SetString(string(out))
			if !ok1 || !ok2 || in.Cmp(got) != 0 {
				t.Fatalf("number %q canonicalised to %q, another value", lit, out)
			}
			if len(out) > len(lit)+21 {
				t.Fatalf("number %q canonicalised to %d bytes", lit, len(out))
			}
		}
	})
}

// caseFields is a struct whose fields encoding/json matches to member
// names without regard to case (bytes.EqualFold): "a" and "A" each to its
// own field exactly, other spellings of them to the first; "k", "K" and
// U+212A KELVIN SIGN to K; "s", "S" and U+017F LATIN SMALL LETTER LONG S
// to S; the Greek sigmas (σ, ς, Σ) to Sigma; ß and ẞ to Sharp; and a
// nested object of the same kind.
type caseFields struct {
	A      any `json:"a"`
	UpperA any `json:"A"`
	K      any
	S      any `json:"s"`
	Amount any
	Sigma  any         `json:"σ"`
	Sharp  any         `json:"ß"`
	N      *caseFields `json:"n"`
}

// smallExponent reports whether the JSON number lit has no exponent or one
// of at most four digits, so that math/big reads it quickly.
func smallExponent(lit []byte) bool {
	i := bytes.IndexAny(lit, "eE")
	if i < 0 {
		return true
	}
	exp := strings.TrimLeft(string(lit[i+1:]), "+-0")
	return len(exp) <= 4
}

// FuzzNumberExact checks that two number literals have the same canonical
// form exactly when math/big reads them as the same value, that the form
// reads back as the literal's value and that it is at most 21 bytes longer.
// The second literal spells the first one's value otherwise (zeros added in
// front and at the end, the point moved and the exponent adjusted), or,
// when tweak says so, a value next to it. Both are also tried with their
// exponents shifted by nearly the bound, where equal values must have equal
// forms (or both be refused) and different values different forms.
func FuzzNumberExact(f *testing.F) {
	f.Add("1999", uint16(2), int16(0), uint8(0), uint8(1), int16(-2), false, uint8(1))
	f.Add("100000000000000001", uint16(3), int16(0), uint8(0), uint8(0), int16(0), false, uint8(0))
	f.Add("1999", uint16(2), int16(0), uint8(0), uint8(0), int16(0), false, uint8(12))
	f.Add("0", uint16(0), int16(5), uint8(3), uint8(2), int16(1), true, uint8(1))
	f.Add("1", uint16(1), int16(400), uint8(0), uint8(0), int16(-1), false, uint8(2))
	f.Add("15", uint16(0), int16(-7), uint8(6), uint8(0), int16(3), true, uint8(3))
	f.Add(strings.Repeat("9876543210", 40)+"1", uint16(200), int16(-3), uint8(1), uint8(5), int16(-250), false, uint8(9))
	f.Add("123", uint16(3), int16(18), uint8(0), uint8(0), int16(0), false, uint8(5))
	f.Fuzz(func(t *testing.T, digits string, point uint16, exp int16, lead, trail uint8, move int16, neg bool, tweak uint8) {
		ds := []byte(strings.Map(func(r rune) rune {
			if '0' <= r && r <= '9' {
				return r
			}
			return -1
		}, digits))
		if len(ds) > 600 {
			ds = ds[:600]
		}
		if len(ds) == 0 {
			ds = []byte("0")
		}
		p := int(point) % (len(ds) + 1)
		litA := spellNumber(neg, ds, p, int64(exp), tweak)

		ds2 := append(append(bytes.Repeat([]byte("0"), int(lead)), ds...), bytes.Repeat([]byte("0"), int(trail))...)
		p2 := min(max(p+int(lead)+int(move), 0), len(ds2))
		exp2 := int64(exp) + int64(p+int(lead)-p2)
		neg2 := neg
		if tweak%4 == 0 { // a value next to the first one, or the same if it is zero
			switch tweak / 4 % 4 {
			case 0:
				neg2 = !neg2
			case 1:
				exp2++
			case 2:
				i := int(tweak) % len(ds2)
				ds2[i] = '0' + (ds2[i]-'0'+1)%10
			case 3:
				ds2 = append(ds2, '1')
			}
		}
		litB := spellNumber(neg2, ds2, p2, exp2, tweak>>2)

		ratA, okA := new(big.Rat).SetString(litA)
		ratB, okB := new(big.Rat).SetString(litB)
		if !okA || !okB {
			t.Fatalf("math/big refused %q or %q", litA, litB)
		}
		same := ratA.Cmp(ratB) == 0
		ca, cb := canonicalOrFail(t, litA), canonicalOrFail(t, litB)
		if (ca == cb) != same {
			t.Fatalf("%q -> %q and %q -> %q, but equal values: %v", litA, ca, litB, cb, same)
		}
		for _, c := range [][3]string{{litA, ca}, {litB, cb}} {
			lit, form := c[0], c[1]
			r, ok := new(big.Rat).SetString(form)
			want, _ := new(big.Rat).SetString(lit)
			if !ok || r.Cmp(want) != 0 {
				t.Fatalf("%q -> %q, another value", lit, form)
			}
			if len(form) > len(lit)+21 {
				t.Fatalf("%q -> %q, %d bytes longer", lit, form, len(form)-len(lit))
			}
			if again := canonicalOrFail(t, form); again != form {
				t.Fatalf("not idempotent: %q -> %q -> %q", lit, form, again)
			}
		}

		// The same pair near the exponent bound, where math/big cannot go.
		shift := int64(999_990_000)
		if tweak&1 == 1 {
			shift = -shift
		}
		litA = spellNumber(neg, ds, p, int64(exp)+shift, tweak)
		litB = spellNumber(neg2, ds2, p2, exp2+shift, tweak>>2)
		sa, errA := fingerprint.CanonicalJSON([]byte(litA))
		sb, errB := fingerprint.CanonicalJSON([]byte(litB))
		switch {
		case same && (errA == nil) != (errB == nil):
			t.Fatalf("equal values %q and %q: errors %v and %v", litA, litB, errA, errB)
		case errA == nil && errB == nil && bytes.Equal(sa, sb) != same:
			t.Fatalf("%q -> %q and %q -> %q, but equal values: %v", litA, sa, litB, sb, same)
		case errA == nil && len(sa) > len(litA)+21, errB == nil && len(sb) > len(litB)+21:
			t.Fatalf("%q -> %q, %q -> %q: too long", litA, sa, litB, sb)
		}
	})
}

// spellNumber writes ±<ds with a point before ds[p]>e<exp> as a JSON
// number, dropping the integer part's leading zeros and, when exp is 0,
// usually the exponent; style picks among the exponent's spellings.
func spellNumber(neg bool, ds []byte, p int, exp int64, style uint8) string {
	var sb strings.Builder
	if neg {
		sb.WriteByte('-')
	}
	ip := bytes.TrimLeft(ds[:p], "0")
	if len(ip) == 0 {
		ip = []byte("0")
	}
	sb.Write(ip)
	if p < len(ds) {
		sb.WriteByte('.')
		sb.Write(ds[p:])
	}
	if exp == 0 && style&8 == 0 {
		return sb.String()
	}
	sb.WriteString([]string{"e", "E", "e", "E"}[style&3])
	switch {
	case exp < 0:
		sb.WriteByte('-')
		exp = -exp
	case style&2 != 0:
		sb.WriteByte('+')
	}
	if style&4 != 0 {
		sb.WriteString("00")
	}
	sb.WriteString(strconv.FormatInt(exp, 10))
	return sb.String()
}

func canonicalOrFail(t *testing.T, lit string) string {
	t.Helper()
	out, err := fingerprint.CanonicalJSON([]byte(lit))
	if err != nil {
		t.Fatalf("CanonicalJSON(%q): %v", lit, err)
	}
	return string(out)
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"",
		"http-v2:297571237b99f236b92d380847997c7b5c41791f8f224b432061ccca8d5db534",
		"json-v2:" + strings.Repeat("0", 64),
		"a.b-c:" + strings.Repeat("f", 64),
		"x:" + strings.Repeat("F", 64),
		":",
		"http-v2:",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fp, err := fingerprint.Parse(s)
		if err != nil {
			if !errors.Is(err, fingerprint.ErrInvalidFingerprint) {
				t.Fatalf("Parse(%q) error %v does not match ErrInvalidFingerprint", s, err)
			}
			if !fp.IsZero() {
				t.Fatalf("Parse(%q) returned %v with an error", s, fp)
			}
			return
		}
		if fp.IsZero() {
			t.Fatalf("Parse(%q) succeeded with the zero value", s)
		}
		if got := fp.String(); got != s {
			t.Fatalf("Parse(%q).String() = %q", s, got)
		}
		text, err := fp.MarshalText()
		if err != nil || string(text) != s {
			t.Fatalf("MarshalText = %q, %v; want %q", text, err, s)
		}
		var back fingerprint.Fingerprint
		if err := back.UnmarshalText(text); err != nil || back != fp {
			t.Fatalf("UnmarshalText(%q) = %v, %v", text, back, err)
		}
	})
}

// FuzzHTTP checks HTTP against an independent model built on url.ParseQuery,
// mime.ParseMediaType and CanonicalJSON.
func FuzzHTTP(f *testing.F) {
	f.Add("POST", "/v1/orders", "b=2&a=1&a=0", "application/json; charset=UTF-8", []byte(`{"b":1,"a":[2,3]}`))
	f.Add("PATCH", "/x", "a=%zz", "application/merge-patch+json", []byte(`{"a":1,}`))
	f.Add("PUT", "", "q=a+b%20c;d", "Text/Plain; Format=flowed; charset=X", []byte("hello"))
	f.Add("", "", "", "", []byte(nil))
	f.Add("POST", "/", "", "text/plain; title*=us-ascii'en'a%20b", []byte(`x`))
	f.Fuzz(func(t *testing.T, method, route, query, ct string, body []byte) {
		req := fingerprint.HTTPRequest{Method: method, Route: route, RawQuery: query, ContentType: ct, Body: body}
		if got, want := fingerprint.HTTP(req), modelHTTP(req); got != want {
			t.Fatalf("HTTP(%+q) = %v, model says %v", req, got, want)
		}
	})
}
