// Package nethttp makes net/http handlers idempotent: one line of
// middleware in front of a handler, and a retried POST with the same
// Idempotency-Key runs the handler exactly once, across every process that
// shares the guard's backend.
//
//	guard, err := middleware.New(memstore.New())
//	...
//	idem, err := nethttp.New(guard, nethttp.WithKeyRequired(true))
//	...
//	mux.Handle("POST /orders", idem(orders))
//
// # Behaviour
//
//	method not guarded (default: POST and PATCH guarded)    pass through
//	no key, key optional (the default)                      pass through
//	no key, key required                                    400 idempotency-key-missing
//	key malformed (empty, > 255 chars, invalid UTF-8,
//	  control chars, a list, repeated header lines; too
//	  long for a record key with its scope)                 400 idempotency-key-malformed
//	body over the limit (default 1 MiB)                     413 request-body-too-large
//	body unreadable (torn stream, broken gzip behind a
//	  decompressing middleware)                             400 request-body-unreadable
//	same key, same request, first still running
//	  past the wait budget                                  409 idempotency-key-in-progress + Retry-After
//	same key, other credentials (no scope hook: another
//	  Authorization, Cookie, client certificate or
//	  WithCredentialHeaders header, or one absent on
//	  one side), whatever the request                       422 idempotency-key-credentials-mismatch; the
//	                                                        stored response is never sent, nothing runs
//	same key, another request (method, route, query,
//	  content type or body)                                 422 idempotency-key-reused
//	same key, same request, completed                       the stored status, allow-listed headers,
//	                                                        Cache-Control and body, with
//	                                                        Idempotent-Replayed: true
//	completed but not replayable (streamed, hijacked,
//	  aborted after it began, larger than the capture
//	  limit, marked by an adapter), or recorded with a
//	  Content-Encoding the retry does not accept            409 response-not-replayable; never re-executed
//	backend unreachable                                     503 idempotency-unavailable + Retry-After
//	                                                        (fail closed; WithFailOpen passes through)
//	backend misconfigured (missing table, permission or
//	  credentials refused: idemkit.CodeMisconfigured,
//	  CodeAuthFailed); the guard logs the fix               500 idempotency-misconfigured, no Retry-After
//	recorded response unreadable (sealed with a key this
//	  server lacks, damaged)                                503 idempotency-unavailable + Retry-After;
//	                                                        never re-executed, even with WithFailOpen
//	handler answered 5xx / panicked                         delivered / 500; not stored (see WithStorePolicy);
//	                                                        the claim is released so a retry runs again
//	handler answered "try again": 401, 407, 408, 425,
//	  428, 429, 503, or any 4xx/5xx with Retry-After        delivered (Retry-After included); not stored
//	                                                        (see StorePolicy.TryAgain), so the retry it
//	                                                        asks for runs the handler again
//	handler's own transaction (pgstore.Tx) failed at
//	  its commit: a statement it let fail, a deferred
//	  constraint                                            500 transaction-failed; rolled back, nothing kept,
//	                                                        the claim released (a retry runs again)
//	  lost a serialization conflict or a deadlock           409 transaction-conflict + Retry-After; the same
//	                                                        roll-back and release: the retry runs again
//	response held until that commit grew past the
//	  response limit (WithMaxResponseBytes)                 500 transaction-response-too-large; the handler's
//	                                                        writes past it fail, and it is rolled back
//
// Error answers are RFC 9457 application/problem+json with stable type URIs
// and Cache-Control: no-store. [WithProblemWriter] writes them in the
// application's own format instead: every answer the middleware writes
// itself (the refusals above, the 500 of a panic and the answers of a
// transaction that did not commit) goes through it as a
// [Problem] (status, kind, type URI, title, detail, Retry-After);
// [WriteProblem] is the default.
//
// # Keys, scope and fingerprint
//
// The key header is an RFC 8941 string ("abc"); by default a bare token
// (abc) is accepted too and spells the same key. Keys are case-sensitive.
// [WithKey] takes the key from elsewhere: another header ([HeaderKey]), a
// query parameter ([QueryKey]), a string field of a JSON body ([JSONKey],
// for which the body is read before the key is looked for, and given back
// to a request without one) or a function of yours ([FuncKey]). Every
// source's keys are checked the same way: at most [WithMaxKeyLength]
// characters, valid UTF-8, no control characters.
// The scope ([WithScope]) is the namespace a key lives in, typically the
// tenant or principal, so one client's key never replays another client's
// response. Without a scope hook, every guarded request is bound to its
// credentials instead (its Authorization and Cookie headers, the client
// certificate of its TLS connection, and the headers
// [WithCredentialHeaders] names, such as X-Api-Key; only a keyed hash of
// them is stored): a request with other credentials is refused, never
// answered with another caller's response. Credential headers
// (Authorization, Proxy-Authorization, Cookie, Set-Cookie and those of
// WithCredentialHeaders) are never recorded nor replayed, whatever
// [WithReplayHeaders] says. The fingerprint covers method, route (the path
// as sent, escapes kept: "/a%2Fb/c" is not "/a/b%2Fc"), query, content
// type and the body (canonical JSON for JSON bodies), so a key reused on another
// route or with another body is a 422, never a replay of the wrong response
// and never a second execution.
//
// # Observability
//
// Every request the middleware sees has exactly one outcome (executed,
// replayed, mismatch, credentials-mismatch, in-progress, not-replayable,
// unavailable, canceled, failed-open; passed-through and rejected for
// those that never reach the guard; see middleware.EventKind), reported
// with the request's context and its operation:
//
//   - to the guard's hooks (middleware.WithHook), which receive the
//     request's context (with whatever middleware in front put there: a
//     request id, a span) and the event;
//   - to middleware in front that watches the request's context
//     (middleware.WatchOutcome), such as an access log.
//
// The operation is a name with few values, fit for a metric attribute:
// by default the ServeMux pattern that matched, behind the method ("POST
// /orders/{id}"), so the middleware belongs on each route (mux.Handle(p,
// idem(h))) for it to be known; around the whole mux it is "". The gin and
// echo adapters use the route their router matched; [WithOperation] names
// it otherwise.
//
// The handler reads its key, scope, operation and fence from its
// request's context (middleware.CallInfoFrom), to fence its own side
// effects or derive downstream keys, and can ask that its response not be
// recorded (middleware.DoNotRecord): it is delivered, the claim is
// released, and a retry with the same key runs again, as for a wrong
// one-time code. [WithRecordTTL] keeps one route's records for longer or
// shorter than the guard's record TTL, when routes share one guard.
//
// # Streaming and the response writer
//
// Handlers write through a capturing writer, which passes everything on at
// once; it implements Unwrap for http.ResponseController and advertises
// Flusher, Hijacker and Pusher exactly when the underlying writer does. A
// flushed or hijacked response is delivered and recorded as
// executed-not-replayable, and so is one marked with [MarkNotReplayable].
//
// A handler that writes nothing is recorded as 200 with an empty body
// (unless the client has gone, and then nothing is recorded, so a retry runs
// it again). A handler that panics with http.ErrAbortHandler after it began
// its answer is recorded as executed-not-replayable; before, nothing is
// recorded.
//
// # Middleware around the guard
//
// The body is always read through the limit, whatever Content-Length
// says, so a middleware in front that decompresses request bodies is fine:
// the fingerprint and the handler see the decompressed body.
//
// A middleware inside the guard (between it and the handler) that
// compresses responses is recorded as it writes: the compressed bytes, with
// their Content-Encoding and Vary, which are always recorded and replayed
// whatever [WithReplayHeaders] says. Accept-Encoding is not part of the
// fingerprint, so a retry may accept other codings than the first request:
// a replay never sends a coding the retry does not accept (no
// Accept-Encoding accepts none); such a retry gets 409
// response-not-replayable instead. Putting compression outside the guard
// records the identity body and replays it to any client.
//
// A timeout middleware (http.TimeoutHandler, echo's Timeout) belongs
// outside the guard, or the guard inside it: one that sits between the
// guard and the handler answers 503 itself when time runs out, while the
// handler goes on running after the guard has recorded that 503 (forgotten
// by the default store policy, so a retry runs the handler a second time
// while the first may still be at work).
//
// # The client
//
// [Transport] is the client side: an http.RoundTripper that gives each POST
// and PATCH a key and retries it with that same key (connection errors,
// 409 with Retry-After, 429, 503), so a lost answer is replayed, never run
// twice. With AttemptTimeout (off by default) it also sends again, with the
// same key and body, an attempt that has no answer in time; the caller's
// deadline bounds every attempt. When the call fails anyway, the outcome is
// unknown and the caller retries with the same key: the error carries it
// ([KeyError]), and [Transport.SetKey] puts it on the request before
// sending, the one way to have it after Client.Timeout.
//
// # Operators
//
// [NewAdmin] returns an http.Handler that inspects (GET ?key=K&scope=S,
// with response=1 for the recorded response) and forgets (DELETE) one
// key's record: one recorded as not replayable, one whose sealed response
// no longer opens. A live claim, whose handler may still be running, is
// refused with a 409 and its lease's end unless the DELETE has force=1.
// It has no authentication of its own: mount it behind yours. The idemkit
// command (cmd/idemkit) does the same from a shell. [DecodeResponse] turns
// a recorded response (middleware.Guard.Inspect's) into its status,
// headers and body, for tools of your own.
//
// # Reuse
//
// [Core] holds all of this independently of the router; the gin and echo
// adapters call [Core.Serve], and [MarkNotReplayable] when their framework
// answers outside the capturing writer.
package nethttp
