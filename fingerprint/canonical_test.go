package fingerprint_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/fingerprint"
)

// maxDepth is the deepest nesting CanonicalJSON accepts, as documented.
const maxDepth = 1000

func TestCanonicalJSON(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{
			name: "RFC 8785 section 3.2.3 example, numbers exact",
			in: `{
				"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
				"string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
				"literals": [null, true, false]
			}`,
			want: `{"literals":[null,true,false],"numbers":[333333333.33333329,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			name: "RFC 8785 section 3.2.3 sorting example",
			in: `{
				"\u20ac": "Euro Sign",
				"\r": "Carriage Return",
				"\ufb33": "Hebrew Letter Dalet With Dagesh",
				"1": "One",
				"\ud83d\ude00": "Emoji: Grinning Face",
				"\u0080": "Control",
				"\u00f6": "Latin Small Letter O With Diaeresis"
			}`,
			want: "{" +
				`"\r":"Carriage Return",` +
				`"1":"One",` +
				"\"\u0080\":\"Control\"," +
				"\"\u00f6\":\"Latin Small Letter O With Diaeresis\"," +
				"\"\u20ac\":\"Euro Sign\"," +
				"\"\U0001F600\":\"Emoji: Grinning Face\"," +
				"\"\uFB33\":\"Hebrew Letter Dalet With Dagesh\"" +
				"}",
		},
		{
			name: "UTF-16 order: U+1F600 before U+FB33 (literal UTF-8 keys)",
			in:   "{\"\uFB33\":1,\"\U0001F600\":2}",
			want: "{\"\U0001F600\":2,\"\uFB33\":1}",
		},
		{"whitespace", " \t\r\n[ 1 , { } , [ ] , \"\" ] \n", `[1,{},[],""]`},
		{"nested objects sorted", `{"b":{"y":1,"x":[{"d":0,"c":0}]},"a":null}`, `{"a":null,"b":{"x":[{"c":0,"d":0}],"y":1}}`},
		{"sorted prefix keys", `{"ab":1,"a":2,"":3}`, `{"":3,"a":2,"ab":1}`},
		{"scalar string", `"x"`, `"x"`},
		{"scalar true", `true`, `true`},
		{"scalar null", ` null `, `null`},
		{"escapes short forms", `"\b\f\n\r\t\"\\\/"`, `"\b\f\n\r\t\"\\/"`},
		{"escapes control", `"\u0000\u001f\u0001\u007f"`, "\"\\u0000\\u001f\\u0001\u007f\""},
		{"escapes uppercase hex", `"\u001F\u00E9"`, "\"\\u001f\u00e9\""},
		{"U+2028 and U+2029 literal", `"\u2028\u2029"`, "\"\u2028\u2029\""},
		{"surrogate pair", `"\uD83D\uDE00"`, "\"\U0001F600\""},
		{"literal non-ASCII kept", "\"h\u00e9llo \u20ac\"", "\"h\u00e9llo \u20ac\""},
		{"literal U+FFFD kept", "\"\uFFFD\"", "\"\uFFFD\""},
		{"escaped key", `{"\u0061":1,"b":2}`, `{"a":1,"b":2}`},
		{"key with quote", `{"\"":1,"!":2}`, `{"!":2,"\"":1}`},
		{"key order by decoded value", `{"\n":1,"!":2}`, `{"\n":1,"!":2}`},
		{"integer", `[0, -0, 1, -1, 10, 1000000]`, `[0,0,1,-1,10,1000000]`},
		{"floats", `[1.0, -0.0, 0.5, 1.50, 100e0, 1e2, 1E+2, 1e-2]`, `[1,0,0.5,1.5,100,100,100,0.01]`},
		{"number forms", `[1e+30, 4.50, 2e-3, 0.000001, 1e-7, 1.7976931348623157e308, 5e-324, 1e21, 1.0e21, 295147905179352830000.0, 9007199254740992]`,
			`[1e+30,4.5,0.002,0.000001,1e-7,1.7976931348623157e+308,5e-324,1e+21,1e+21,295147905179352830000,9007199254740992]`},
		{"exponent forms", `[0.0000001, 1.5e-7, 123e20, 1.23e22, 1.23e25, -4e-10]`,
			`[1e-7,1.5e-7,12300000000000000000000,12300000000000000000000,1.23e+25,-4e-10]`},
		{"no underflow", `1e-400`, `1e-400`},
		{"no overflow", `[1e400, -1.5e309]`, `[1e+400,-1.5e+309]`},
		{"short decimals kept", `[0.1, 19.99, -0.000123, 123456789.12345]`, `[0.1,19.99,-0.000123,123456789.12345]`},
		{"long decimal kept", `0.12345678901234567890`, `0.1234567890123456789`},
		{"big integers kept", `[12345678901234567890, 12345678901234567891, -98765432109876543210]`,
			`[12345678901234567890,12345678901234567891,-98765432109876543210]`},
		{"2^53+1 kept", `9007199254740993`, `9007199254740993`},
		{"2^53+1 with fraction kept", `9007199254740993.0`, `9007199254740993`},
		{"huge integer digits kept", digits400, digits400},
		{"huge integer ending in many zeros", "1" + strings.Repeat("0", 400), "1e+400"},
		{"max depth", strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth),
			strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkCanonical(t, tt.in, tt.want) })
	}
}

func TestCanonicalJSONInvariance(t *testing.T) {
	a := `{"id":12345678901234567890,"items":[{"sku":"a-1","qty":2},{"sku":"b-2","qty":1.0}],"note":"caf\u00e9","amount":19.990}`
	variants := []string{
		"{\n  \"amount\": 19.99,\n  \"note\": \"café\",\n  \"items\": [ { \"qty\": 2, \"sku\": \"a-1\" }, { \"qty\": 1, \"sku\": \"b-2\" } ],\n  \"id\": 12345678901234567890\n}",
		`{"note":"caf\u00E9","amount":1999e-2,"id":12345678901234567890,"items":[{"qty":2e0,"sku":"\u0061-1"},{"sku":"b\u002d2","qty":1}]}`,
	}
	want, err := fingerprint.CanonicalJSON([]byte(a))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range variants {
		got, err := fingerprint.CanonicalJSON([]byte(v))
		if err != nil {
			t.Fatalf("CanonicalJSON(%q): %v", v, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("CanonicalJSON(%q)\n got %s\nwant %s", v, got, want)
		}
	}
	// Different content stays different.
	for _, v := range []string{
		`{"id":12345678901234567891,"items":[{"sku":"a-1","qty":2},{"sku":"b-2","qty":1}],"note":"café","amount":19.99}`,
		`{"id":12345678901234567890,"items":[{"sku":"b-2","qty":1},{"sku":"a-1","qty":2}],"note":"café","amount":19.99}`,
		`{"id":12345678901234567890,"items":[{"sku":"a-1","qty":2},{"sku":"b-2","qty":1}],"note":"cafe","amount":19.99}`,
		`{"id":"12345678901234567890","items":[{"sku":"a-1","qty":2},{"sku":"b-2","qty":1}],"note":"café","amount":19.99}`,
	} {
		got, err := fingerprint.CanonicalJSON([]byte(v))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(got, want) {
			t.Errorf("CanonicalJSON(%q) equals the canonical form of a different document", v)
		}
	}
}

func TestCanonicalJSONRefuses(t *testing.T) {
	tests := []struct {
		name, in string
		offset   int64 // -1: do not check
	}{
		{"empty", "", 0},
		{"only whitespace", "  ", 2},
		{"trailing data", `{} {}`, 3},
		{"trailing comma array", `[1,]`, 3},
		{"trailing comma object", `{"a":1,}`, 7},
		{"missing colon", `{"a" 1}`, 5},
		{"missing value", `{"a":}`, 5},
		{"unquoted key", `{a:1}`, 1},
		{"single quotes", `'a'`, 0},
		{"unterminated string", `"abc`, 4},
		{"unterminated array", `[1`, 2},
		{"unterminated object", `{"a":1`, 6},
		{"raw control char", "\"a\x01\"", 2},
		{"raw newline", "\"a\nb\"", 2},
		{"invalid escape", `"\x"`, 1},
		{"backslash at the end", `"\`, 1},
		{"bad hex in low surrogate", `"\ud800\uDZ00"`, 7},
		{"array without comma", `[1 2]`, 3},
		{"object without comma", `{"a":1 "b":2}`, 7},
		{"duplicate empty name", `{"":1,"":2}`, 6},
		{"short unicode escape", `"\u12"`, 1},
		{"lone high surrogate", `"\ud800"`, 1},
		{"lone high surrogate then text", `"\ud800abcdef"`, 1},
		{"high surrogate then non-low", `"\ud800\u0041"`, 1},
		{"lone low surrogate", `"\udc00"`, 1},
		{"reversed surrogates", `"\ude00\ud83d"`, 1},
		{"invalid UTF-8", "\"\xff\"", 1},
		{"invalid UTF-8 in key", "{\"\xc3\x28\":1}", 2},
		{"UTF-8 encoded surrogate", "\"\xed\xa0\x80\"", 1},
		{"overlong UTF-8", "\"\xc0\xaf\"", 1},
		{"truncated UTF-8", "\"\xe2\x82\"", 1},
		{"invalid UTF-8 outside strings", "[1]\xff", 3},
		{"BOM", "\xef\xbb\xbf{}", 0},
		{"duplicate key", `{"a":1,"a":2}`, 7},
		{"duplicate key unsorted", `{"b":1,"a":2,"b":3}`, 13},
		{"duplicate key after unescaping", `{"a":1,"\u0061":2}`, 7},
		{"duplicate key nested", `[{"x":{"k":1,"k":1}}]`, 13},
		{"exponent out of range", `1e1000000001`, 0},
		{"exponent out of range negative", `[-1e1000000001]`, 1},
		{"exponent out of range small", `{"a":1e-1000000001}`, 5},
		{"exponent out of range after shift", `10e1000000000`, 0},
		{"exponent out of range small after shift", `0.01e-999999999`, 0},
		{"exponent out of range huge", `[0,1e99999999999999999999999999]`, 3},
		{"exponent out of range huge negative", `-5E-99999999999999999999999999`, 0},
		{"leading zero", `01`, 1},
		{"leading plus", `+1`, 0},
		{"bare minus", `-`, 1},
		{"no digits after point", `1.`, 2},
		{"no digits in exponent", `1e+`, 3},
		{"leading point", `.5`, 0},
		{"NaN", `NaN`, 0},
		{"Infinity", `-Infinity`, 1},
		{"hex number", `0x10`, 1},
		{"bad literal", `tru`, 0},
		{"capital literal", `True`, 0},
		{"too deep arrays", strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), maxDepth},
		{"too deep objects", strings.Repeat(`{"a":`, maxDepth+1) + "1" + strings.Repeat("}", maxDepth+1), 5 * maxDepth},
		{"hostile depth", strings.Repeat("[", 1<<20), -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fingerprint.CanonicalJSON([]byte(tt.in))
			if err == nil {
				t.Fatalf("CanonicalJSON(%q) = %s, want an error", tt.in, got)
			}
			if got != nil {
				t.Errorf("CanonicalJSON returned %q with its error", got)
			}
			if !errors.Is(err, fingerprint.ErrInvalidJSON) {
				t.Errorf("errors.Is(%v, ErrInvalidJSON) = false", err)
			}
			var se *fingerprint.SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("errors.As(%v, *SyntaxError) = false", err)
			}
			if tt.offset >= 0 && se.Offset != tt.offset {
				t.Errorf("offset = %d, want %d (%v)", se.Offset, tt.offset, err)
			}
			if len(err.Error()) > 200 {
				t.Errorf("error message too long (%d bytes): %.80s...", len(err.Error()), err)
			}
		})
	}
}

// TestCanonicalJSONDeepUnsorted orders members at every level of a deep
// document large enough for the recorded (not in-place) ordering.
func TestCanonicalJSONDeepUnsorted(t *testing.T) {
	big := strings.Repeat("x", 64<<10)
	const depth = 300
	in := strings.Repeat(`{"b":[`, depth) + `"` + big + `"` + strings.Repeat(`],"a":{"d":0,"c":[{"f":1,"e":2}]}}`, depth)
	want := strings.Repeat(`{"a":{"c":[{"e":2,"f":1}],"d":0},"b":[`, depth) + `"` + big + `"` + strings.Repeat(`]}`, depth)
	got, err := fingerprint.CanonicalJSON([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("got  %.120s...\nwant %.120s...", got, want)
	}
}

func TestCanonicalJSONErrorNoInput(t *testing.T) {
	secret := strings.Repeat("s3cr3t", 50)
	_, err := fingerprint.CanonicalJSON([]byte(`{"password":"` + secret + `",}`))
	if err == nil {
		t.Fatal("want an error")
	}
	if strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "password") {
		t.Errorf("error message quotes the input: %v", err)
	}
}

func TestCanonicalJSONDoesNotModifyInput(t *testing.T) {
	in := []byte(`{"b":"\u00e9","a":[3,2,1]}`)
	orig := bytes.Clone(in)
	if _, err := fingerprint.CanonicalJSON(in); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, orig) {
		t.Errorf("input modified: %s", in)
	}
}

// TestCanonicalJSONManyMembers sorts an object large enough to leave the
// fast paths, with escaped names and nested objects between them.
func TestCanonicalJSONManyMembers(t *testing.T) {
	const n = 300
	var in, want strings.Builder
	in.WriteString("{")
	for i := n - 1; i >= 0; i-- {
		if i != n-1 {
			in.WriteString(",")
		}
		if i%2 == 1 { // escaped name, nested object in reverse order
			fmt.Fprintf(&in, `"\u006b%03d":{"z":1,"y":[%d]}`, i, i)
		} else {
			fmt.Fprintf(&in, `"k%03d":%d`, i, i)
		}
	}
	in.WriteString("}")
	want.WriteString("{")
	for i := range n {
		if i != 0 {
			want.WriteString(",")
		}
		if i%2 == 1 {
			fmt.Fprintf(&want, `"k%03d":{"y":[%d],"z":1}`, i, i)
		} else {
			fmt.Fprintf(&want, `"k%03d":%d`, i, i)
		}
	}
	want.WriteString("}")
	got, err := fingerprint.CanonicalJSON([]byte(in.String()))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want.String() {
		t.Errorf("got  %.200s\nwant %.200s", got, want.String())
	}
}

// TestCanonicalJSONCaseVariantNamesKeepTheirOrder: members whose names
// encoding/json matches to the same field (equal under its case folding,
// K and the Kelvin sign, s and the long s included) keep their input order,
// on the places the sort by name gives them; every other member is sorted
// as RFC 8785 sorts it.
func TestCanonicalJSONCaseVariantNamesKeepTheirOrder(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"lower then upper", `{"amount":1,"Amount":1000}`, `{"amount":1,"Amount":1000}`},
		{"upper then lower", `{"Amount":1000,"amount":1}`, `{"Amount":1000,"amount":1}`},
		{"others sorted around them", `{"z":0,"amount":1,"c":3,"Amount":2}`, `{"amount":1,"Amount":2,"c":3,"z":0}`},
		{"interleaved with another name", `{"b":1,"B":2,"a":3}`, `{"b":1,"a":3,"B":2}`},
		{"two sets", `{"b":1,"a":2,"B":3,"A":4}`, `{"a":2,"b":1,"A":4,"B":3}`},
		{"escaped name", `{"\u0061mount":1,"AMOUNT":2}`, `{"amount":1,"AMOUNT":2}`},
		{"Kelvin sign", `{"k":1,"\u212a":2,"K":3}`, "{\"k\":1,\"\u212a\":2,\"K\":3}"},
		{"long s", "{\"\u017f\":1,\"s\":2}", "{\"\u017f\":1,\"s\":2}"},
		{"long s in a longer name", "{\"\u017fku\":1,\"SKU\":2,\"a\":0}", "{\"\u017fku\":1,\"a\":0,\"SKU\":2}"},
		{"Greek sigmas", "{\"\u03c3\":1,\"\u03a3\":2,\"\u03c2\":3}", "{\"\u03c3\":1,\"\u03a3\":2,\"\u03c2\":3}"},
		{"sharp s and capital sharp s", "{\"\u1e9e\":1,\"\u00df\":2}", "{\"\u1e9e\":1,\"\u00df\":2}"},
		// Only simple folding: ß is not "ss", dotless ı is not i.
		{"sharp s is not ss", "{\"ss\":1,\"\u00df\":2,\"SS\":3}", "{\"ss\":1,\"SS\":3,\"\u00df\":2}"},
		{"dotless i is not i", "{\"\u0131\":1,\"i\":2,\"I\":3}", "{\"i\":2,\"I\":3,\"\u0131\":1}"},
		{"nested objects", `{"x":{"B":1,"b":2},"X":[{"b":1,"B":2}],"a":{"y":0,"Y":1}}`,
			`{"x":{"B":1,"b":2},"a":{"y":0,"Y":1},"X":[{"b":1,"B":2}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkCanonical(t, tt.in, tt.want) })
	}
}

// payment is what a handler typically decodes: encoding/json matches
// "amount", "Amount" and "AMOUNT" to Amount, the last one winning.
type payment struct {
	Amount   int
	Currency string `json:"currency"`
}

// TestCanonicalJSONCaseVariantOrderIsADifference: two bodies that
// encoding/json decodes differently, because their case-variant members
// come in another order, have different canonical forms; the same members
// with only other members moved around have the same.
func TestCanonicalJSONCaseVariantOrderIsADifference(t *testing.T) {
	decode := func(s string) payment {
		var p payment
		if err := json.Unmarshal([]byte(s), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	canonical := func(s string) string {
		out, err := fingerprint.CanonicalJSON([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	for _, pair := range [][2]string{
		{`{"amount":1,"Amount":1000}`, `{"Amount":1000,"amount":1}`},
		{`{"currency":"eur","amount":1,"AMOUNT":1000}`, `{"AMOUNT":1000,"currency":"eur","amount":1}`},
		{`{"Currency":"usd","currency":"eur"}`, `{"currency":"eur","Currency":"usd"}`},
	} {
		if decode(pair[0]) == decode(pair[1]) {
			t.Fatalf("%s and %s decode alike; the pair tests nothing", pair[0], pair[1])
		}
		if a, b := canonical(pair[0]), canonical(pair[1]); a == b {
			t.Errorf("%s and %s, which encoding/json reads as %+v and %+v, have one canonical form %s",
				pair[0], pair[1], decode(pair[0]), decode(pair[1]), a)
		}
	}
	for _, pair := range [][2]string{
		{`{"amount":1,"Amount":1000,"currency":"eur"}`, `{"currency":"eur","amount":1,"Amount":1000}`},
		{`{"amount":1,"currency":"eur","Amount":1000}`, `{"currency":"eur","amount":1,"Amount":1000}`},
	} {
		if a, b := canonical(pair[0]), canonical(pair[1]); a != b {
			t.Errorf("%s -> %s and %s -> %s: the case-variant members are in the same order", pair[0], a, pair[1], b)
		}
	}
}

// checkCanonical checks that in's canonical form is want, and that the
// canonical form of want is want itself.
func checkCanonical(t *testing.T, in, want string) {
	t.Helper()
	got, err := fingerprint.CanonicalJSON([]byte(in))
	if err != nil {
		t.Fatalf("CanonicalJSON(%q): %v", in, err)
	}
	if string(got) != want {
		t.Errorf("CanonicalJSON(%q)\n got %s\nwant %s", in, got, want)
	}
	again, err := fingerprint.CanonicalJSON(got)
	if err != nil || !bytes.Equal(again, got) {
		t.Errorf("not idempotent: %s -> %s, %v", got, again, err)
	}
}

// TestCanonicalJSONForms checks canonical forms and refusals, as the
// package's examples once showed them.
func TestCanonicalJSONForms(t *testing.T) {
	out, err := fingerprint.CanonicalJSON([]byte(`{
		"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
		"string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
		"literals": [null, true, false]
	}`))
	if want := `{"literals":[null,true,false],"numbers":[333333333.33333329,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`; err != nil || string(out) != want {
		t.Errorf("got %s, %v; want %s", out, err, want)
	}
	// Numbers compare by their exact decimal value, never through a
	// double; large ids keep their digits; a huge exponent stays in
	// exponent form.
	for in, want := range map[string]string{
		`[100, 1e2, 100.0, 1.00e+2, 10000e-2]`:                                 `[100,100,100,100,100]`,
		`[100.000000000000001, 19.990000000000000001, 19.99]`:                  `[100.000000000000001,19.990000000000000001,19.99]`,
		`[12345678901234567890, 1.2345678901234567891e19, 9007199254740993.0]`: `[12345678901234567890,12345678901234567891,9007199254740993]`,
		`[-0, 0.0, 0e5, 1e400, 0.0000001, 1e999999999]`:                        `[0,0,0,1e+400,1e-7,1e+999999999]`,
	} {
		if out, err := fingerprint.CanonicalJSON([]byte(in)); err != nil || string(out) != want {
			t.Errorf("%s: got %s, %v; want %s", in, out, err, want)
		}
	}
	for in, want := range map[string]string{
		`{"id":1,"id":2}`: "fingerprint: invalid JSON at offset 8: duplicate object member name",
		`"\ud800"`:        "fingerprint: invalid JSON at offset 1: lone high surrogate escape",
		`1e1000000001`:    "fingerprint: invalid JSON at offset 0: number out of range (in scientific notation its exponent exceeds 1000000000 in magnitude)",
		`{"a":1} x`:       "fingerprint: invalid JSON at offset 8: trailing data after the JSON value",
	} {
		_, err := fingerprint.CanonicalJSON([]byte(in))
		var se *fingerprint.SyntaxError
		if !errors.Is(err, fingerprint.ErrInvalidJSON) || !errors.As(err, &se) || se.Offset < 0 || err.Error() != want {
			t.Errorf("%s: got %v; want %s", in, err, want)
		}
	}
}
