// Package fingerprint hashes what a request asks for, so that an idempotency
// key reused with a different request is detected (HTTP 422, gRPC
// FailedPrecondition) while a faithful retry matches.
//
// # Fingerprints
//
// A [Fingerprint] is an algorithm name and a SHA-256 digest. It prints as
// "<alg>:<64 lowercase hex digits>" ([Fingerprint.String], [Parse], and the
// encoding.TextMarshaler pair for storage). Fingerprints of different
// algorithms are not comparable: [Fingerprint.Compare] reports so, and the
// guard then treats the request as matching, so that upgrading an algorithm
// never turns retries in flight into mismatches. Other packages name their
// own algorithms with [New].
//
// # HTTP requests
//
// [HTTP] ("http-v2") covers the method, the route (for the HTTP adapters,
// the path as the client sent it, escapes kept: "/a%2Fb/c" and "/a/b%2Fc"
// are different paths to a router, and so to the fingerprint), the query
// (parameter order does not matter, the order of a repeated parameter's
// values does), the content type (case and parameter order do not matter,
// parameters do) and the body. A JSON body (application/json or a "+json"
// media type) is hashed in its canonical form, so member order (but that
// of names a Go handler matches alike, below), white space, escapes and
// number spelling do not matter; any other body, and a JSON-typed body
// that is not valid JSON, is hashed as raw bytes, tagged apart from
// canonical forms. Headers other than Content-Type are left out.
//
// # Canonical JSON
//
// [CanonicalJSON] follows RFC 8785, the JSON Canonicalization Scheme (JCS),
// for everything but numbers and members that a Go handler reads as one:
// members sorted by UTF-16 code units, no insignificant white space,
// strings printed as ECMAScript's JSON.stringify prints them.
//
// Member order is left out only where it cannot change what a Go handler
// reads. encoding/json (and the binding of gin and echo over it) matches
// member names to struct fields without regard to case, the last match
// winning: {"amount":1,"Amount":1000} decodes to an Amount of 1000,
// {"Amount":1000,"amount":1} to 1. So members whose names encoding/json
// matches alike keep their input order: names equal under its case
// folding (bytes.EqualFold: rune by rune, in one orbit of
// unicode.SimpleFold, so "k", "K" and "\u212a" (the Kelvin sign) are one
// name, as are "s", "S" and "\u017f" (the long s), but "ß" is not "ss").
// The sort by name gives such a set of members its places, which they take
// in their input order; every other member is where the sort puts it, so
// an object without such names is sorted exactly as RFC 8785 sorts it.
// {"b":1,"B":2,"a":3} becomes {"b":1,"a":3,"B":2}, and {"B":2,"a":3,"b":1}
// stays as it is. Two objects thus have the same canonical form exactly
// when they hold the same members (with values of the same canonical form)
// in orders that agree on every set of names matched alike; nested
// objects likewise. Exact duplicates are refused (below, and [HTTP] then
// hashes the body's bytes), so their order, too, is never lost.
//
// It is strict where a fingerprint needs it to be: invalid UTF-8, lone
// surrogate escapes, duplicate member names, trailing data, exponents
// beyond 1000000000 in magnitude and nesting deeper than 1000 levels are
// errors matching [ErrInvalidJSON] (a [*SyntaxError] gives the offset).
//
// Numbers compare by their exact decimal value, never through a double,
// whatever their number of digits: two literals have the same canonical
// form exactly when they denote the same number. 1e2, 100, 100.0, 1.00e+2
// and 10000e-2 are one number, and so are -0, 0, 0.0 and 0e5; but
// 100.000000000000001 is not 100, 19.990000000000000001 is not 19.99 and
// 12345678901234567891 is not 12345678901234567890, so a handler that reads
// an amount or an id exactly never sees a different value replayed. The
// canonical form is plain decimal digits for integers (unless they end in
// more than 20 zeros, so integer literals keep their digits) and for other
// numbers of magnitude at least 10^-6, with no trailing zero (19.99,
// 0.000001); exponent form for the rest (1e+21, 1.5e-7, 1e+400), so that a
// large exponent such as 1e999999999 never expands into its zeros.
//
// [Value] and [JSON] ("json-v2") are the SHA-256 of the canonical JSON of a
// Go value (through encoding/json) or of JSON text.
//
// The "-v2" algorithms replaced "http-v1" and "json-v1", which rounded
// numbers with a fraction or an exponent to the nearest double. A
// fingerprint stored under a "-v1" algorithm is not comparable with a
// "-v2" one, so a retry in flight across the upgrade is never refused as a
// mismatch.
//
// # Performance
//
// Fingerprinting reuses pooled buffers: [HTTP] of a small JSON POST costs
// under a microsecond and no allocations in the common case (a content type
// with at most one simple parameter, such as "application/json;
// charset=utf-8", and a valid JSON body).
package fingerprint
