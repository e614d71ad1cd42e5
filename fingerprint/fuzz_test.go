package fingerprint_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
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
	})
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"",
		"http-v1:4e811408f6575bba90fb7cf1b90c9237c6dab72faec6f6ed9e2378e791f17d5a",
		"json-v1:" + strings.Repeat("0", 64),
		"a.b-c:" + strings.Repeat("f", 64),
		"x:" + strings.Repeat("F", 64),
		":",
		"http-v1:",
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
