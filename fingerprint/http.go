package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"mime"
	"slices"
	"strings"
	"unicode/utf8"
)

// HTTPRequest is what [HTTP] fingerprints. Headers other than Content-Type
// are left out: they vary between faithful retries.
type HTTPRequest struct {
	Method      string // e.g. "POST"; compared exactly, as HTTP methods are case-sensitive
	Route       string // the request's path as sent, escapes kept (not a route pattern, which many requests share); compared exactly
	RawQuery    string // the URL query string without '?', unparsed
	ContentType string // the Content-Type header value
	Body        []byte // the request body; nil and empty are the same
}

// Tags that open the variable parts of the hash input, so that no two
// different readings of a request can yield the same bytes.
const (
	tagQuery    = 'Q' // parsed query: count, then name and value of each pair
	tagRawQuery = 'q' // a query url.ParseQuery refuses: its raw text
	tagMedia    = 'M' // parsed content type: media type, count, name and value of each parameter
	tagRawMedia = 'm' // a content type mime.ParseMediaType refuses: its trimmed text
	tagJSON     = 'J' // the canonical JSON of the body
	tagRawBody  = 'R' // the body's bytes
)

// maxQueryParams mirrors url.ParseQuery's default limit: a query with more
// parameters fails to parse and is hashed raw.
const maxQueryParams = 10000

// rawInline is the largest raw body copied into the pooled hash input;
// larger bodies are streamed into the hash.
const rawInline = 16 << 10

// HTTP returns the "http-v2" fingerprint of req, each part
// length-prefixed into one SHA-256 input:
//
//   - the method and the route, exactly as given;
//   - the query as [net/url.ParseQuery] reads it, sorted stably by name:
//     the order of different parameters does not matter, that of a
//     repeated parameter's values does; an empty query matches none, and
//     one ParseQuery refuses is hashed as its raw text;
//   - the content type as [mime.ParseMediaType] reads it (type, parameter
//     names and charset lowercased, parameters sorted): a parameter
//     present is a difference; one it refuses is hashed trimmed;
//   - the body: for application/json or a "+json" type, its canonical form
//     (docs/http.md); otherwise, or when that refuses it, its raw bytes,
//     tagged apart. A nil and an empty body match.
//
// The input: every string behind its length, every count, as 8 big-endian
// bytes; "http-v2", the method, the route; 'Q', the pair count and each
// name and value, or 'q' and the raw query; 'M', the media type, the
// parameter count and each name and value, or 'm' and the trimmed value;
// 'J' and the canonical body, or 'R' and the raw body. It is fixed for
// "http-v2". HTTP never fails and does not modify req.Body.
func HTTP(req HTTPRequest) Fingerprint {
	st := getState()
	b := appendField(st.buf[:0], algHTTP)
	b = appendField(b, req.Method)
	b = appendField(b, req.Route)
	b = st.appendQuery(b, req.RawQuery)
	b, isJSON := st.appendContentType(b, req.ContentType)

	var sum [32]byte
	done := false
	if isJSON && len(req.Body) > 0 {
		mark := len(b)
		b = append(b, tagJSON)
		b = binary.BigEndian.AppendUint64(b, 0) // patched below
		var err error
		b, err = st.c.appendCanonical(b, req.Body)
		if err == nil {
			binary.BigEndian.PutUint64(b[mark+1:], uint64(len(b)-mark-9))
			sum = sha256.Sum256(b)
			done = true
		} else {
			b = b[:mark]
		}
	}
	if !done {
		b = append(b, tagRawBody)
		b = binary.BigEndian.AppendUint64(b, uint64(len(req.Body)))
		if len(req.Body) <= rawInline {
			b = append(b, req.Body...)
			sum = sha256.Sum256(b)
		} else {
			h := sha256.New()
			h.Write(b)
			h.Write(req.Body)
			h.Sum(sum[:0])
		}
	}
	st.buf = b[:0]
	putState(st)
	return Fingerprint{alg: algHTTP, sum: sum}
}

// appendField appends s with its length as 8 big-endian bytes before it.
func appendField[S ~string | ~[]byte](b []byte, s S) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// queryPair locates one decoded pair in state.qbuf: name qbuf[k:v], value
// qbuf[v:end].
type queryPair struct{ k, v, end int }

func (st *state) appendQuery(b []byte, raw string) []byte {
	if !st.parseQuery(raw) {
		b = append(b, tagRawQuery)
		return appendField(b, raw)
	}
	b = append(b, tagQuery)
	b = binary.BigEndian.AppendUint64(b, uint64(len(st.pairs)))
	for _, p := range st.pairs {
		b = appendField(b, st.qbuf[p.k:p.v])
		b = appendField(b, st.qbuf[p.v:p.end])
	}
	return b
}

// parseQuery decodes raw into st.pairs, sorted stably by name, with the
// semantics of url.ParseQuery; it reports false where ParseQuery would
// return an error.
func (st *state) parseQuery(raw string) bool {
	st.pairs, st.qbuf = st.pairs[:0], st.qbuf[:0]
	if raw == "" {
		return true
	}
	if strings.Count(raw, "&") >= maxQueryParams {
		return false
	}
	for raw != "" {
		var part string
		part, raw, _ = strings.Cut(raw, "&")
		if strings.IndexByte(part, ';') >= 0 {
			return false
		}
		if part == "" {
			continue
		}
		name, value, _ := strings.Cut(part, "=")
		p := queryPair{k: len(st.qbuf)}
		var ok bool
		if st.qbuf, ok = queryUnescape(st.qbuf, name); !ok {
			return false
		}
		p.v = len(st.qbuf)
		if st.qbuf, ok = queryUnescape(st.qbuf, value); !ok {
			return false
		}
		p.end = len(st.qbuf)
		st.pairs = append(st.pairs, p)
	}
	q := st.qbuf
	slices.SortStableFunc(st.pairs, func(x, y queryPair) int {
		return bytes.Compare(q[x.k:x.v], q[y.k:y.v])
	})
	return true
}

// queryUnescape appends s decoded as url.QueryUnescape decodes it ("%XX"
// escapes, '+' as a space) to dst; false for a malformed escape.
func queryUnescape(dst []byte, s string) ([]byte, bool) {
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '+':
			dst = append(dst, s[start:i]...)
			dst = append(dst, ' ')
			start = i + 1
		case '%':
			if i+2 >= len(s) {
				return dst, false
			}
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if !ok1 || !ok2 {
				return dst, false
			}
			dst = append(dst, s[start:i]...)
			dst = append(dst, hi<<4|lo)
			i += 2
			start = i + 1
		}
	}
	return append(dst, s[start:]...), true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// appendContentType appends the content type's part of the hash input and
// reports whether the media type is JSON.
func (st *state) appendContentType(b []byte, ct string) ([]byte, bool) {
	if mt, name, value, n, ok := simpleMediaType(ct); ok {
		// The common cases, without mime.ParseMediaType's allocations.
		if !validMediaType(mt) {
			b = append(b, tagRawMedia)
			return appendField(b, strings.TrimSpace(ct)), false
		}
		b = appendLowerField(append(b, tagMedia), mt)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
		if n == 1 {
			b = appendLowerField(b, name)
			if len(name) == len("charset") && strings.EqualFold(name, "charset") {
				b = appendLowerField(b, value)
			} else {
				b = appendField(b, value)
			}
		}
		return b, isJSONMedia(mt)
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		b = append(b, tagRawMedia)
		return appendField(b, strings.TrimSpace(ct)), false
	}
	b = append(b, tagMedia)
	b = appendField(b, mt)
	names := st.names[:0]
	for name := range params {
		names = append(names, name)
	}
	slices.Sort(names)
	st.names = names
	b = binary.BigEndian.AppendUint64(b, uint64(len(names)))
	for _, name := range names {
		v := params[name]
		if name == "charset" {
			v = strings.ToLower(v)
		}
		b = appendField(b, name)
		b = appendField(b, v)
	}
	return b, isJSONMedia(mt)
}

// appendLowerField is appendField for ASCII s, lowercased.
func appendLowerField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}

// simpleMediaType splits the common forms of a content type, ASCII with at
// most one parameter whose value is a token, as mime.ParseMediaType would:
// mt is the media type trimmed (not yet lowercased or validated), and n
// (0 or 1) parameters name=value follow. ok is false for anything else
// (non-ASCII, several parameters, quoted values, RFC 2231 names with '*',
// malformed parameters), which ParseMediaType itself must handle.
//
// For ASCII, ParseMediaType's lowercasing and trimming are ASCII
// operations, so validMediaType(mt) is its verdict on the media type, which
// it checks before any parameter.
func simpleMediaType(ct string) (mt, name, value string, n int, ok bool) {
	for i := 0; i < len(ct); i++ {
		if ct[i] >= utf8.RuneSelf {
			return "", "", "", 0, false
		}
	}
	base, rest, hasParams := strings.Cut(ct, ";")
	mt = strings.TrimSpace(base)
	if !hasParams {
		return mt, "", "", 0, true
	}
	if !validMediaType(mt) {
		return mt, "", "", 0, true // refused before any parameter is read
	}
	name, rest = consumeToken(trimLeftSpace(rest))
	if name == "" || strings.IndexByte(name, '*') >= 0 {
		return "", "", "", 0, false
	}
	rest = trimLeftSpace(rest)
	if rest == "" || rest[0] != '=' {
		return "", "", "", 0, false
	}
	value, rest = consumeToken(trimLeftSpace(rest[1:]))
	if value == "" {
		return "", "", "", 0, false
	}
	if rest = strings.TrimSpace(rest); rest != "" && rest != ";" {
		return "", "", "", 0, false
	}
	return mt, name, value, 1, true
}

// trimLeftSpace trims the ASCII white space unicode.IsSpace reports (as
// strings.TrimSpace does for ASCII) from the start of s.
func trimLeftSpace(s string) string {
	for len(s) > 0 {
		switch s[0] {
		case ' ', '\t', '\n', '\v', '\f', '\r':
			s = s[1:]
		default:
			return s
		}
	}
	return s
}

// consumeToken splits v after its leading run of token characters.
func consumeToken(v string) (token, rest string) {
	i := 0
	for i < len(v) && isTokenChar(v[i]) {
		i++
	}
	return v[:i], v[i:]
}

// validMediaType reports whether mt is a token, optionally followed by '/'
// and a token: the syntax mime.ParseMediaType accepts for the media type.
func validMediaType(mt string) bool {
	i := 0
	for i < len(mt) && isTokenChar(mt[i]) {
		i++
	}
	if i == 0 {
		return false
	}
	if i == len(mt) {
		return true
	}
	if mt[i] != '/' {
		return false
	}
	i++
	j := i
	for j < len(mt) && isTokenChar(mt[j]) {
		j++
	}
	return j > i && j == len(mt)
}

// isTokenChar reports whether c may appear in an RFC 2045 token: US-ASCII
// printable characters other than space and the tspecials.
func isTokenChar(c byte) bool { return tokenChars[c] }

var tokenChars = func() (t [256]bool) {
	for c := byte('!'); c < 0x7f; c++ {
		t[c] = strings.IndexByte(`()<>@,;:\"/[]?=`, c) < 0
	}
	return t
}()

// isJSONMedia reports whether the media type mt (ASCII, any case) is
// application/json or has a "+json" suffix.
func isJSONMedia(mt string) bool {
	if strings.EqualFold(mt, "application/json") {
		return true
	}
	slash := strings.IndexByte(mt, '/')
	return slash >= 0 && len(mt)-slash > len("+json") &&
		strings.EqualFold(mt[len(mt)-len("+json"):], "+json")
}
