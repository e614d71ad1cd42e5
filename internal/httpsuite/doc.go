// Package httpsuite is the behaviour suite that the repository's HTTP
// adapters (nethttp, ginadapter, echoadapter and echo5adapter) run in
// their tests: every row of the HTTP table (pass-through methods, missing
// and malformed keys, body limits, in-progress duplicates, mismatches,
// replays with allow-listed headers, not-replayable responses, backend
// outages, 5xx and panics) and the edge cases around them (streaming,
// chunked bodies, JSON key order, client disconnects, tenant scopes,
// compressed responses, aborted handlers, credentials bound to records
// and never recorded, unreadable records under fail-open), the key sources
// (query, JSON body, a function), the problem writer, and observability
// (the handler's call information, responses it asks not to record, every
// outcome reaching the guard's hooks with the request's context and a
// middleware in front that watches it, record TTLs per route), through a
// real HTTP server and client.
//
// An adapter provides a [Stack]: a function that returns its framework's
// handler serving the suite's business handler behind its middleware; the
// suite serves it on a real listener.
//
//	func TestBehaviourTable(t *testing.T) {
//		httpsuite.Run(t, func(t *testing.T, g *middleware.Guard, opts []nethttp.Option, app http.Handler) http.Handler {
//			idem, err := nethttp.New(g, opts...)
//			if err != nil {
//				t.Fatal(err)
//			}
//			mux := http.NewServeMux()
//			mux.Handle("/", idem(app))
//			return mux
//		})
//	}
//
// [RunWith] runs the same cases on other backends (Redis, PostgreSQL, ...);
// [Composed] is memory records composed with memory locks.
//
// [Bench] benchmarks a stack in process: the bare framework, a first
// execution and a replay, as sub-benchmarks bare, first and replay. A
// [BenchStack] mounts the benchmark's handler behind the middleware, or
// without it when the guard is nil:
//
//	func BenchmarkStack(b *testing.B) {
//		httpsuite.Bench(b, func(b *testing.B, g *middleware.Guard, opts []nethttp.Option, app http.Handler) http.Handler {
//			if g == nil {
//				return app
//			}
//			idem, err := nethttp.New(g, opts...)
//			if err != nil {
//				b.Fatal(err)
//			}
//			return idem(app)
//		})
//	}
//
// For what only a framework can set up (route patterns, unmatched routes,
// its own context), an adapter's tests build the server themselves and use
// the helpers: [NewGuard], [Serve], [Post] and its [Reply], [WantProblem],
// and the checks [CheckMisconfigurationsRefused] (with a [Build]),
// [CheckPathsUnderOnePattern], [CheckUnmatchedRouteRecorded],
// [CheckTenantScope], [CheckRequestDecompressedInFront] and
// [CheckOperations] (with a [RouteStack]). The framework's own middleware
// flow (a skipper, its response object, its error handler, a middleware
// of its own in front) is checked from the client side by
// [CheckOutcomesWatched], [CheckSkipped], [CheckFrontSeesResponse],
// [CheckErrorRendered], [CheckRefusalsReturned] (with [WantProblemFields]
// or [WantErrorCode]), [CheckStreamedNotReplayable] and
// [CheckCompressedInsideTheGuard].
package httpsuite
