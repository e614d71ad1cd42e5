// Package fingerprint hashes what a request asks for, so that an idempotency
// key reused with a different request is detected (HTTP 422, gRPC
// FailedPrecondition) while a faithful retry matches.
//
// A [Fingerprint] is an algorithm name and a SHA-256 digest, printed as
// "<alg>:<64 lowercase hex digits>". Fingerprints of different algorithms
// are not comparable ([Fingerprint.Compare]), and the guard then treats
// the request as matching, so upgrading an algorithm never turns retries
// in flight into mismatches. Other packages name their own algorithms with
// [New].
//
// [HTTP] ("http-v2") covers the method, the route as sent (escapes kept),
// the query, the content type and the body, a JSON body in its canonical
// form; [Value] ("json-v2") is the canonical JSON of a Go value. In the
// canonical form numbers compare by their exact decimal value, never
// through a double, and member order is ignored only where a Go handler
// cannot tell it (docs/http.md states the rule).
//
// [HTTP] of a small JSON POST costs under a microsecond and no
// allocations in the common case.
package fingerprint
