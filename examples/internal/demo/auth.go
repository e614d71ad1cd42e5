package demo

import (
	"context"
	"net/http"
)

// Anonymous is the principal of a request without credentials.
const Anonymous = "anonymous"

// Principal returns the principal behind an Authorization value (an HTTP
// header or the gRPC "authorization" metadata), from the demo's token
// table: "Bearer alice-1" and "Bearer alice-2" (Alice's token before and
// after a refresh) are "alice", "Bearer bob-1" is "bob", no credentials at
// all is [Anonymous]. Any other value is unknown: ok is false, and the
// demos refuse the request (401, or Unauthenticated) before the guard
// sees it.
//
// A real service verifies the token (a signature, a session lookup) and
// takes the principal from it. The demos make it the scope of their
// idempotency keys: one caller's key then never replays another caller's
// response, and a caller whose token was refreshed between two retries
// still gets its replay.
func Principal(authorization string) (principal string, ok bool) {
	switch authorization {
	case "":
		return Anonymous, true
	case "Bearer alice-1", "Bearer alice-2":
		return "alice", true
	case "Bearer bob-1":
		return "bob", true
	}
	return "", false
}

type principalKey struct{}

// Authenticate is the demos' authentication middleware: it refuses a
// request with unknown credentials (401 with WWW-Authenticate: Bearer), or
// with several Authorization lines, and passes the others on with their
// principal in the request's context (see [Scope]).
func Authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lines := r.Header.Values("Authorization")
		value := ""
		if len(lines) == 1 {
			value = lines[0]
		}
		p, ok := Principal(value)
		if !ok || len(lines) > 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="demo"`)
			http.Error(w, "unknown credentials", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// Scope is the demos' idempotency scope hook (nethttp.WithScope): the
// principal [Authenticate] found for the request. A request that did not
// go through Authenticate has none (""), a scope of its own.
func Scope(r *http.Request) string {
	p, _ := r.Context().Value(principalKey{}).(string)
	return p
}
