package nethttp

import (
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idemkit/middleware"
)

// Key errors; a *keyError matches one of them and middleware.ErrInvalidKey.
var (
	errKeyMissing   = errors.New("nethttp: idempotency key missing")
	errKeyMalformed = errors.New("nethttp: idempotency key malformed")
)

// keyError says what is wrong with a key header: reason is the detail of
// the 400 answer. Its message never repeats the header's value.
type keyError struct {
	reason string
	err    error
}

func (e *keyError) Error() string { return e.err.Error() + ": " + e.reason }

func (e *keyError) Unwrap() []error { return []error{e.err, middleware.ErrInvalidKey} }

func malformed(format string, args ...any) error {
	return &keyError{reason: fmt.Sprintf(format, args...), err: errKeyMalformed}
}

// parseKey parses the field lines of a key header: one RFC 8941 String
// item (parameters validated and ignored) or, unless strict, a bare value
// of visible ASCII other than `"`, `,`, `;` and `\`, which spells the same
// key (Stripe's SDKs send bare UUIDs). A list, several lines, control or
// non-ASCII characters and a key over maxLen (<= 0: no limit) are
// refused with a *keyError; no line at all is errKeyMissing.
func parseKey(values []string, strict bool, maxLen int) (string, error) {
	switch len(values) {
	case 0:
		return "", &keyError{reason: "no idempotency key header", err: errKeyMissing}
	case 1:
	default:
		return "", malformed("the header appears %d times; send it once", len(values))
	}
	v := strings.Trim(values[0], " \t")
	if v == "" {
		return "", malformed("the header is empty")
	}
	var key string
	var rest string
	if v[0] == '"' {
		k, r, err := parseString(v)
		if err != nil {
			return "", err
		}
		key, rest = k, r
	} else {
		if strict {
			return "", malformed(`the key must be a quoted string, such as "8e03978e-40d5-43e8-bc93-6894a57f9324"`)
		}
		i := 0
		for i < len(v) && bareChar(v[i]) {
			i++
		}
		if i < len(v) {
			return "", malformed("character %s at position %d is not allowed in a bare key", describe(v[i]), i)
		}
		key = v
	}
	if err := checkParams(rest); err != nil {
		return "", err
	}
	if key == "" {
		return "", malformed("the key is empty")
	}
	if maxLen > 0 && len(key) > maxLen {
		return "", malformed("the key has %d characters; at most %d are allowed", len(key), maxLen)
	}
	return key, nil
}

func bareChar(c byte) bool {
	return c > 0x20 && c < 0x7f && c != '"' && c != ',' && c != ';' && c != '\\'
}

func describe(c byte) string {
	switch {
	case c == ',':
		return "',' (a list)"
	case c < 0x20 || c == 0x7f:
		return fmt.Sprintf("0x%02x (a control character)", c)
	case c >= 0x80:
		return fmt.Sprintf("0x%02x (not ASCII)", c)
	}
	return fmt.Sprintf("%q", c)
}

// parseString parses an sf-string at the start of v and returns it
// unescaped with the rest of v.
func parseString(v string) (string, string, error) {
	// The common case, no escapes: the key is a substring of v.
	for i := 1; i < len(v); i++ {
		c := v[i]
		if c == '"' {
			return v[1:i], v[i+1:], nil
		}
		if c == '\\' || c < 0x20 || c > 0x7e {
			break
		}
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", "", malformed(`a backslash in a quoted key may only escape '"' or '\'`)
			}
			b.WriteByte(v[i])
		case c == '"':
			return b.String(), v[i+1:], nil
		case c < 0x20 || c > 0x7e:
			return "", "", malformed("character %s at position %d is not allowed in a key", describe(c), i)
		default:
			b.WriteByte(c)
		}
	}
	return "", "", malformed("the quoted key has no closing quote")
}

// checkParams validates what follows the item: RFC 8941 parameters, and
// nothing else (a comma makes the field a list).
func checkParams(s string) error {
	for s != "" {
		if s[0] != ';' {
			if s[0] == ',' {
				return malformed("the header holds a list; send exactly one key")
			}
			return malformed("unexpected %s after the key", describe(s[0]))
		}
		s = strings.TrimLeft(s[1:], " ")
		// param-key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )
		i := 0
		for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] == '*' || i > 0 && (s[i] >= '0' && s[i] <= '9' || s[i] == '_' || s[i] == '-' || s[i] == '.')) {
			i++
		}
		if i == 0 {
			return malformed("a parameter after the key has no valid name")
		}
		s = s[i:]
		if s == "" || s[0] != '=' {
			continue // a parameter without a value is boolean true
		}
		n, err := bareItemLen(s[1:])
		if err != nil {
			return err
		}
		s = s[1+n:]
	}
	return nil
}

// bareItemLen returns the length of the RFC 8941 bare item at the start of
// s: an integer or decimal, a string, a token, a byte sequence or a boolean.
func bareItemLen(s string) (int, error) {
	if s == "" {
		return 0, malformed("a parameter value is missing")
	}
	switch c := s[0]; {
	case c == '"':
		_, rest, err := parseString(s)
		return len(s) - len(rest), err
	case c == '?':
		if len(s) >= 2 && (s[1] == '0' || s[1] == '1') {
			return 2, nil
		}
	case c == ':':
		if j := strings.IndexByte(s[1:], ':'); j >= 0 {
			for _, b := range []byte(s[1 : 1+j]) {
				if !(b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '+' || b == '/' || b == '=') {
					return 0, malformed("a parameter's byte sequence is not base64")
				}
			}
			return j + 2, nil
		}
	case c == '-' || c >= '0' && c <= '9':
		i := 1
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		if s[i-1] != '-' && s[i-1] != '.' {
			return i, nil
		}
	case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '*':
		i := 1
		for i < len(s) && (tchar(s[i]) || s[i] == ':' || s[i] == '/') {
			i++
		}
		return i, nil
	}
	return 0, malformed("a parameter value is not a valid structured-field item")
}

// tchar reports whether c is an RFC 9110 token character.
func tchar(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
