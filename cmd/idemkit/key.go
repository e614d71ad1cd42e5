package main

import "strings"

// headerKey returns the key an Idempotency-Key header value spells: an RFC
// 8941 (RFC 9651) String ("k1", with \" and \\ escapes, optionally
// followed by parameters, which are ignored) is unquoted, as the HTTP
// middleware reads it; anything else (a bare token, a gRPC or Go key) is
// the key as it is. A value that starts with a quote but is not a
// well-formed String is taken as it is too.
func headerKey(v string) string {
	if len(v) < 2 || v[0] != '"' {
		return v
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			if i+1 == len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
				return v
			}
			i++
			b.WriteByte(v[i])
		case c == '"':
			if rest := v[i+1:]; (rest != "" && rest[0] != ';') || b.Len() == 0 {
				return v
			}
			return b.String()
		case c < 0x20 || c > 0x7e:
			return v // not a String: its characters are printable ASCII
		default:
			b.WriteByte(c)
		}
	}
	return v // no closing quote
}
