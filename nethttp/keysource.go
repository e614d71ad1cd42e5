package nethttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// KeySource says where [WithKey] finds a request's idempotency key. The
// zero KeySource is invalid.
type KeySource struct {
	kind  keyKind
	name  string                                             // the header (canonical), query parameter or JSON field
	fn    func(r *http.Request, body []byte) (string, error) // keyFunc
	body  bool                                               // the body is read before the key is looked for
	where string                                             // what to send, for the detail of a missing key
}

type keyKind uint8

const (
	keyInvalid keyKind = iota
	keyHeader
	keyQuery
	keyJSON
	keyFunc
)

// HeaderKey takes the key from the header name: an RFC 8941 string
// ("abc") or, unless [WithStrictKeys], a bare token spelling the same key.
// A repeated header line or a list is malformed.
func HeaderKey(name string) KeySource {
	name = http.CanonicalHeaderKey(name)
	return KeySource{kind: keyHeader, name: name, where: "an " + name + " header"}
}

// QueryKey takes the key from the query parameter name, percent-decoded.
// A parameter given twice or empty is malformed. Keys in URLs end up in
// access logs: prefer a header where clients can send one.
func QueryKey(name string) KeySource {
	return KeySource{kind: keyQuery, name: name, where: "the query parameter " + strconv.Quote(name)}
}

// JSONKey takes the key from the string field of the body's top-level
// JSON object (case counts). A body without it, or with it null, has no
// key; a non-string, empty, repeated field or one holding U+FFFD is
// malformed. The body is read first (a 413 even without a key) and given
// back to a request without a key.
func JSONKey(field string) KeySource {
	return KeySource{kind: keyJSON, name: field, body: true, where: "the JSON body field " + strconv.Quote(field)}
}

// FuncKey takes the key from f: "" for none; an error is a 400
// idempotency-key-malformed whose detail is its message (never repeat the
// key in it). With readsBody, f gets the body, read first within
// [WithMaxBodyBytes]; without, f gets nil and must not read r.Body.
func FuncKey(f func(r *http.Request, body []byte) (key string, err error), readsBody bool) KeySource {
	return KeySource{kind: keyFunc, fn: f, body: readsBody, where: "an idempotency key"}
}

// valid reports whether the source can be used, and if not, why.
func (s KeySource) valid() (string, bool) {
	switch s.kind {
	case keyHeader:
		return "the key header name is not a valid field name", validHeaderName(s.name)
	case keyQuery:
		return "the key's query parameter name is empty", s.name != ""
	case keyJSON:
		return "the key's JSON field name is empty", s.name != ""
	case keyFunc:
		return "the key function is nil", s.fn != nil
	}
	return "the key source is not set (use HeaderKey, QueryKey, JSONKey or FuncKey)", false
}

// find returns r's key, "" when it has none; a refusal is a *keyError
// matching errKeyMalformed.
func (s KeySource) find(r *http.Request, body []byte, strict bool, maxLen int) (string, error) {
	var key string
	var err error
	switch s.kind {
	case keyHeader:
		values := r.Header[s.name]
		if len(values) == 0 {
			return "", nil
		}
		key, err = parseKey(values, strict, maxLen)
	case keyQuery:
		key, err = queryKey(r, s.name)
	case keyJSON:
		key, err = jsonKey(body, s.name)
	case keyFunc:
		key, err = s.fn(r, body)
		if err != nil {
			var ke *keyError
			if !errors.As(err, &ke) {
				err = &keyError{reason: err.Error(), err: errKeyMalformed}
			}
		}
	}
	if err != nil || key == "" {
		return "", err
	}
	if err := validateKey(key, maxLen); err != nil {
		return "", err
	}
	return key, nil
}

// validateKey is the check every key passes (maxLen <= 0: no limit).
func validateKey(key string, maxLen int) error {
	ascii := true
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			ascii = false
			break
		}
	}
	if ascii { // printable ASCII, as every header key is
		if maxLen > 0 && len(key) > maxLen {
			return malformed("the key has %d characters; at most %d are allowed", len(key), maxLen)
		}
		return nil
	}
	if !utf8.ValidString(key) {
		return malformed("the key is not valid UTF-8")
	}
	n := 0
	for i, c := range key {
		if unicode.IsControl(c) {
			return malformed("the character at byte %d of the key is a control character", i)
		}
		n++
	}
	if maxLen > 0 && n > maxLen {
		return malformed("the key has %d characters; at most %d are allowed", n, maxLen)
	}
	return nil
}

// queryKey returns the query parameter name, "" when absent.
func queryKey(r *http.Request, name string) (string, error) {
	if r.URL == nil || r.URL.RawQuery == "" {
		return "", nil
	}
	values, err := parseQuery(r.URL.RawQuery, name)
	if err != nil {
		return "", err
	}
	switch len(values) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", malformed("the query parameter %s appears %d times; send it once", strconv.Quote(name), len(values))
	}
	if values[0] == "" {
		return "", malformed("the query parameter %s is empty", strconv.Quote(name))
	}
	return values[0], nil
}

// parseQuery returns the values of the query parameter name in raw; a
// value that cannot be decoded is malformed, never lost.
func parseQuery(raw, name string) ([]string, error) {
	var values []string
	for raw != "" {
		var part string
		part, raw, _ = strings.Cut(raw, "&")
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		k, err := url.QueryUnescape(k)
		if err != nil {
			continue // not a parameter the middleware can name
		}
		if k != name {
			continue
		}
		if v, err = url.QueryUnescape(v); err != nil {
			return nil, malformed("the query parameter %s is not validly percent-encoded", strconv.Quote(name))
		}
		values = append(values, v)
	}
	return values, nil
}

// jsonKey implements JSONKey. U+FFFD is refused because an escaped lone
// surrogate decodes to it, so two different bodies could spell one key.
func jsonKey(body []byte, field string) (string, error) {
	body = bytes.TrimLeft(body, " \t\r\n")
	if len(body) == 0 || body[0] != '{' || !bytes.Contains(body, []byte(`"`)) || !json.Valid(body) {
		return "", nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil { // '{'
		return "", nil
	}
	var key string
	found := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", nil // not reached: the body is valid JSON
		}
		name, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return "", nil // not reached
		}
		if name != field {
			continue
		}
		if found {
			return "", malformed("the JSON body field %s appears twice", strconv.Quote(field))
		}
		found = true
		switch {
		case string(raw) == "null":
			continue
		case raw[0] != '"':
			return "", malformed("the JSON body field %s is not a string", strconv.Quote(field))
		case !utf8.Valid(raw):
			return "", malformed("the JSON body field %s is not valid UTF-8", strconv.Quote(field))
		}
		if err := json.Unmarshal(raw, &key); err != nil {
			return "", nil // not reached: a valid JSON string
		}
		switch {
		case key == "":
			return "", malformed("the JSON body field %s is empty", strconv.Quote(field))
		case strings.ContainsRune(key, utf8.RuneError):
			return "", malformed("the JSON body field %s holds U+FFFD or an escaped lone surrogate", strconv.Quote(field))
		}
	}
	return key, nil
}
