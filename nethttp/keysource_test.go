package nethttp

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idemkit/middleware"
)

func TestJSONKey(t *testing.T) {
	for _, c := range []struct {
		body string
		want string
		bad  bool
	}{
		{`{"k":"abc"}`, "abc", false},
		{` {"a":[1,{"k":"no"}],"k":"abc","b":{"k":"no"}} `, "abc", false},
		{`{"k":"a\"b\\c\u00e9"}`, `a"b\cé`, false},
		{`{"\u006b":"escaped name"}`, "escaped name", false},
		{`{"K":"other case"}`, "", false},
		{`{"k":null}`, "", false},
		{`{}`, "", false},
		{``, "", false},
		{`not json`, "", false},
		{`{"k":"abc"`, "", false},
		{`{"k":"abc"} {"k":"def"}`, "", false},
		{`["k","abc"]`, "", false},
		{`"k"`, "", false},
		{`{"k":1}`, "", true},
		{`{"k":true}`, "", true},
		{`{"k":["a"]}`, "", true},
		{`{"k":{"a":"b"}}`, "", true},
		{`{"k":""}`, "", true},
		{`{"k":"a","k":"a"}`, "", true},
		{`{"k":null,"k":"a"}`, "", true},
		{`{"k":"a\ud800"}`, "", true},
		{`{"k":"a\ufffd"}`, "", true},
		{"{\"k\":\"a\xffb\"}", "", true},
	} {
		got, err := jsonKey([]byte(c.body), "k")
		if got != c.want || (err != nil) != c.bad {
			t.Errorf("jsonKey(%s) = %q, %v; want %q, malformed %v", c.body, got, err, c.want, c.bad)
		}
		if err != nil && (!errors.Is(err, errKeyMalformed) || !errors.Is(err, middleware.ErrInvalidKey)) {
			t.Errorf("jsonKey(%s): error %v is not a malformed key", c.body, err)
		}
	}
}

func TestQueryKey(t *testing.T) {
	for _, c := range []struct {
		query string
		want  string
		bad   bool
	}{
		{"key=abc", "abc", false},
		{"a=1&key=a%2Fb+c&b=2", "a/b c", false},
		{"k%65y=abc", "abc", false},
		{"keys=abc&ke=y", "", false},
		{"", "", false},
		{"a=%zz&key=ok", "ok", false},
		{"key", "", true},
		{"key=", "", true},
		{"key=a&key=a", "", true},
		{"key=a%", "", true},
		{"key=a%2", "", true},
		{"key=%zz", "", true},
	} {
		r := &http.Request{URL: &url.URL{RawQuery: c.query}}
		got, err := queryKey(r, "key")
		if got != c.want || (err != nil) != c.bad {
			t.Errorf("queryKey(%q) = %q, %v; want %q, malformed %v", c.query, got, err, c.want, c.bad)
		}
	}
}

func TestValidateKey(t *testing.T) {
	for _, c := range []struct {
		key string
		ok  bool
	}{
		{"abc", true},
		{"café", true},
		{strings.Repeat("é", 5), true},
		{strings.Repeat("é", 6), false},
		{"a\x00", false},
		{"a\tb", false},
		{"a\x7f", false},
		{"a\u0085", false},
		{"a\xff", false},
	} {
		if err := validateKey(c.key, 5); (err == nil) != c.ok {
			t.Errorf("validateKey(%q) = %v; want ok %v", c.key, err, c.ok)
		}
	}
}

// FuzzJSONKey checks the key extraction from JSON bodies against the
// standard library's decoding: it never panics; an accepted key is what
// decoding the body into a map gives for the field (a string), valid
// UTF-8 without U+FFFD; no key is a body that is not one JSON object, or
// has no such field, or has it null; a refusal is a malformed-key error.
func FuzzJSONKey(f *testing.F) {
	for _, s := range []string{`{"k":"abc"}`, `{"k":1}`, `{"k":null}`, `{"k":"a","k":"b"}`, `{"a":{"k":"x"},"k":"y"}`,
		`{"k":"\ud800"}`, `{"k":"a\u0001"}`, `[]`, `{`, "{\"k\":\"\xff\"}", `{"\u006b":"esc"}`} {
		f.Add([]byte(s), "k")
	}
	f.Fuzz(func(t *testing.T, body []byte, field string) {
		key, err := jsonKey(body, field)
		var m map[string]json.RawMessage
		isObject := json.Unmarshal(body, &m) == nil && m != nil
		if err != nil {
			if !errors.Is(err, errKeyMalformed) {
				t.Fatalf("error %v is not a malformed key", err)
			}
			if !isObject {
				t.Fatalf("refused %q, which is not a JSON object: %v", body, err)
			}
			return
		}
		if key == "" {
			if isObject && m[field] != nil && string(m[field]) != "null" {
				t.Fatalf("%q: no key, but the field is %s", body, m[field])
			}
			return
		}
		if !isObject {
			t.Fatalf("%q is not a JSON object, and gave the key %q", body, key)
		}
		var want string
		if err := json.Unmarshal(m[field], &want); err != nil || want != key {
			t.Fatalf("%q: key %q; decoding gives %q (%v)", body, key, want, err)
		}
		if !utf8.ValidString(key) || strings.ContainsRune(key, utf8.RuneError) {
			t.Fatalf("accepted key %q is not clean UTF-8", key)
		}
	})
}

// FuzzQueryKey checks the key extraction from a query: it never panics;
// where the query decodes without error, an accepted key is the one value
// the standard library's parser gives for the name; a refusal is a
// malformed-key error.
func FuzzQueryKey(f *testing.F) {
	for _, s := range []string{"key=a", "key=a&key=b", "key=", "key=%zz", "k%65y=a+b", "a=1;key=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, query string) {
		r := &http.Request{URL: &url.URL{RawQuery: query}}
		key, err := queryKey(r, "key")
		if err != nil {
			if !errors.Is(err, errKeyMalformed) {
				t.Fatalf("error %v is not a malformed key", err)
			}
			return
		}
		values, perr := url.ParseQuery(query)
		if perr != nil || strings.Contains(query, ";") {
			return // the standard library's parser refuses parts this one reads
		}
		switch got := values["key"]; {
		case key == "" && len(got) != 0:
			t.Fatalf("%q: no key; the query has %q", query, got)
		case key != "" && (len(got) != 1 || got[0] != key):
			t.Fatalf("%q: key %q; the query has %q", query, key, got)
		}
	})
}
