// Package httpsuite is the behaviour suite every HTTP adapter of idemkit
// passes — net/http, gin and echo alike — and that users can run against
// their own stack: every row of the HTTP table (pass-through methods,
// missing and malformed keys, body limits, in-progress duplicates,
// mismatches, replays with allow-listed headers, not-replayable responses,
// backend outages, 5xx and panics) and the edge cases around them
// (streaming, chunked bodies, JSON key order, client disconnects, tenant
// scopes), through a real HTTP server and client.
//
// An adapter provides a [Stack]: a function that serves the suite's
// business handler ([App]) behind its middleware on a real listener.
//
//	func TestBehaviour(t *testing.T) {
//		httpsuite.Run(t, func(t *testing.T, g *middleware.Guard, opts []nethttp.Option, app http.Handler) string {
//			srv := httptest.NewServer(nethttp.Middleware(g, opts...)(app))
//			t.Cleanup(srv.Close)
//			return srv.URL
//		})
//	}
//
// [RunWith] runs the same cases on other backends (Redis, PostgreSQL, ...).
package httpsuite
