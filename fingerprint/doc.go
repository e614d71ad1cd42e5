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
// [HTTP] ("http-v1") covers the method, the route, the query (parameter
// order does not matter, the order of a repeated parameter's values does),
// the content type (case and parameter order do not matter, parameters do)
// and the body. A JSON body (application/json or a "+json" media type) is
// hashed in its canonical form, so key order, white space, escapes and
// number spelling do not matter; any other body, and a JSON-typed body that
// is not valid JSON, is hashed as raw bytes, tagged apart from canonical
// forms. Headers other than Content-Type are left out.
//
// # Canonical JSON
//
// [CanonicalJSON] implements RFC 8785, the JSON Canonicalization Scheme
// (JCS): members sorted by UTF-16 code units, no insignificant white space,
// strings and numbers printed as ECMAScript's JSON.stringify prints them. It
// is strict where a fingerprint needs it to be: invalid UTF-8, lone
// surrogate escapes, duplicate member names, trailing data, numbers beyond
// the range of a double and nesting deeper than 1000 levels are errors
// matching [ErrInvalidJSON] (a [*SyntaxError] gives the offset).
//
// One deliberate extension: an integer literal (no fraction, no exponent) is
// kept exactly as its decimal digits, -0 becoming 0. Up to 2^53 this is
// exactly what JCS prints; beyond, JCS rounds to the nearest double, which
// would give 12345678901234567890 and 12345678901234567891 (two different
// ids) the same fingerprint. Numbers with a fraction or an exponent are
// rounded to a double as JCS says: 1.0 and 1 are the same number, and so are
// 1e2 and 100, but 1.2345678901234567891e19 (rounded) and
// 12345678901234567891 (kept) are not.
//
// [Value] and [JSON] ("json-v1") are the SHA-256 of the canonical JSON of a
// Go value (through encoding/json) or of JSON text.
//
// # Performance
//
// Fingerprinting reuses pooled buffers: [HTTP] of a small JSON POST costs
// under a microsecond and no allocations in the common case (a content type
// with at most one simple parameter, such as "application/json;
// charset=utf-8", and a valid JSON body).
package fingerprint
