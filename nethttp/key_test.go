package nethttp

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/middleware"
)

func TestParseKey(t *testing.T) {
	cases := []struct {
		in      []string
		strict  bool
		want    string
		wantErr error
	}{
		{[]string{`"abc"`}, true, "abc", nil},
		{[]string{`"abc"`}, false, "abc", nil},
		{[]string{`abc`}, false, "abc", nil},
		{[]string{`8e03978e-40d5-43e8-bc93-6894a57f9324`}, false, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{[]string{`  "abc"  `}, true, "abc", nil},
		{[]string{`"a\"b\\c"`}, true, `a"b\c`, nil},
		{[]string{`"a b"`}, true, "a b", nil},
		{[]string{`"abc";p=1;q;r="x";s=?0;t=:aGk=:;u=tok/en;v=-1.5`}, true, "abc", nil},
		{[]string{`"Case"`}, true, "Case", nil},
		{nil, false, "", errKeyMissing},
		{[]string{``}, false, "", errKeyMalformed},
		{[]string{`""`}, false, "", errKeyMalformed},
		{[]string{`abc`}, true, "", errKeyMalformed},
		{[]string{`"a"`, `"a"`}, false, "", errKeyMalformed},
		{[]string{`"a", "b"`}, false, "", errKeyMalformed},
		{[]string{`a,b`}, false, "", errKeyMalformed},
		{[]string{`"abc`}, false, "", errKeyMalformed},
		{[]string{`"a\x"`}, false, "", errKeyMalformed},
		{[]string{"\"a\x01\""}, false, "", errKeyMalformed},
		{[]string{"a\x7f"}, false, "", errKeyMalformed},
		{[]string{"\"caf\xc3\xa9\""}, false, "", errKeyMalformed},
		{[]string{`"abc"x`}, false, "", errKeyMalformed},
		{[]string{`"abc";`}, false, "", errKeyMalformed},
		{[]string{`"abc";P=1`}, false, "", errKeyMalformed},
		{[]string{`"abc";p=`}, false, "", errKeyMalformed},
		{[]string{`"abc";p=(x)`}, false, "", errKeyMalformed},
		{[]string{`a b`}, false, "", errKeyMalformed},
		{[]string{strings.Repeat("k", 255)}, false, strings.Repeat("k", 255), nil},
		{[]string{strings.Repeat("k", 256)}, false, "", errKeyMalformed},
		{[]string{`"` + strings.Repeat("k", 256) + `"`}, true, "", errKeyMalformed},
	}
	for _, c := range cases {
		got, err := parseKey(c.in, c.strict, 255)
		if got != c.want || !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
			t.Errorf("parseKey(%q, strict=%v) = %q, %v; want %q, %v", c.in, c.strict, got, err, c.want, c.wantErr)
		}
		var ke *keyError
		if err != nil && (!errors.As(err, &ke) || ke.reason == "" || !errors.Is(err, middleware.ErrInvalidKey)) {
			t.Errorf("parseKey(%q): error %v is not a *keyError with a reason matching middleware.ErrInvalidKey", c.in, err)
		}
	}
}

// FuzzParseKey checks the key parser on arbitrary header values: it never
// panics; an accepted key is 1–255 printable ASCII characters; a bare
// accepted value parses to itself, and the quoted form of any accepted key
// parses to the same key in strict mode.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, `abc`, `"a\"b"`, `"a";p=1`, `a,b`, `""`, "\"\x00\"", `"abc`, strings.Repeat("k", 300)} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, v string, strict bool) {
		key, err := parseKey([]string{v}, strict, 255)
		if err != nil {
			if !errors.Is(err, errKeyMalformed) || strings.Contains(err.Error(), v) && len(v) > 8 {
				t.Fatalf("error %v: not errKeyMalformed, or repeats the value", err)
			}
			return
		}
		if key == "" || len(key) > 255 {
			t.Fatalf("accepted key of length %d", len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("accepted key %q has a non-printable byte", key)
			}
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		if again, err := parseKey([]string{quoted}, true, 255); err != nil || again != key {
			t.Fatalf("the quoted form %s of accepted key %q parses to %q, %v", quoted, key, again, err)
		}
	})
}
