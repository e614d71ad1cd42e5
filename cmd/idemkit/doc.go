// Command idemkit lets an operator inspect and forget one idempotency key
// on a guard's backend (Redis, PostgreSQL, Firestore or DynamoDB), list the keys of
// a scope or with a prefix, and sweep expired records from the backends
// that need it. It sees the records as the guard does: through
// middleware.Guard.Inspect, Guard.List and Guard.Forget, with the same
// namespace and scope rules.
//
// Build it from the repository:
//
//	cd cmd/idemkit && go build -o idemkit .
//
// # Usage
//
//	idemkit inspect -url URL -key KEY [-scope SCOPE] [-namespace NS] [-response | -raw] [-json]
//	idemkit forget  -url URL -key KEY [-scope SCOPE] [-namespace NS] [-force] [-json]
//	idemkit list    -url URL [-scope SCOPE | -all-scopes] [-key-prefix P] [-namespace NS] [-limit N] [-after CURSOR] [-json]
//	idemkit sweep   -url URL [-json]
//
// inspect prints the key's record without changing it: its state (claimed,
// that is running; completed; or not-replayable), the fingerprint's
// algorithm, whether it is bound to the credentials of the request that
// made it, its fence, when it was written and when it expires (a claim:
// the end of its lease), the size of the recorded response and whether it
// is sealed, and a running claim's recorded steps (middleware.Step: each
// one's name and result size, and what they take of the limits of 32
// steps and 64 KiB; with -response the start of each result). The
// response itself only with -response (it may hold
// personal data), decoded by the adapter that recorded it: for the HTTP
// middleware (net/http, gin, echo) its status, the headers a replay sends
// and the body; for the gRPC interceptor the error's code, message and
// detail types, or the response message's type and size, with the header
// and trailer metadata; for Do and Execute the value. A body or value is
// printed as it is when it is printable text, else in base64. -raw writes
// the recorded bytes to stdout and nothing else (pipe them to a file or a
// decoder of your own: nethttp.DecodeResponse, grpcinterceptor.DecodeRecorded).
// A sealed response is never shown: this tool holds no seal keys (the
// operators' HTTP handler, nethttp.NewAdmin, runs with the application's
// guard and opens it).
//
// forget deletes the key's outcome so that the next request with the key
// runs again: the way out of a key recorded as not replayable, and of one
// whose sealed response no longer opens. It reads the record first and
// says what was deleted: forgetting a completed record means that the next
// request with the key runs the work a second time instead of getting the
// recorded response: do it only when that is what you want. A claim whose
// lease is live is refused (exit 1, nothing deleted), with the lease's
// end: its request may still be running and renewing it, and deleting it
// would let a retry on another node run the work a second time while the
// first still runs. A claim whose holder crashed frees its key when its
// lease runs out (the guard's lease TTL, 10 s by default); -force deletes
// a live claim at once, for a holder known to be gone: its work, if it
// still runs, cannot record its outcome. Without -force, forget deletes
// the record only if it is an outcome (see middleware.Guard.Forget for the
// interval that leaves).
//
// list prints the live records (running claims and outcomes) of one scope
// (-scope; none by default, as for inspect), of every scope of the
// namespace (-all-scopes), or only the keys of the scope that start with
// -key-prefix: each one's scope, key, state, expiry and size. It prints at
// most -limit records (default 100, at most 1000) and, when more may
// follow, a cursor: run it again with -after CURSOR for the next page. A
// page may hold fewer records than -limit, even none, while a cursor
// follows (Redis scans a bounded part of its keyspace per page). Redis
// lists the keys of each master in turn, in no order; it cannot list a
// record whose key it stores hashed (over 512 bytes, or not readable
// text). PostgreSQL and Firestore list every record (Firestore: every key
// that is valid UTF-8) in the order of their keys as stored.
//
// sweep deletes the expired records of PostgreSQL (pgstore) and Firestore
// (firestorestore) in batches, as Store.Sweep does, and prints how many
// it deleted; run it from a scheduled job if no process runs a sweeper.
// Redis and DynamoDB need none (every key carries its TTL; DynamoDB's TTL
// deletes expired items): sweep says so and exits 0.
//
// # Keys, scopes and namespaces
//
// -key is the idempotency key as the client sent it: Idempotency-Key:
// "order-42" is -key '"order-42"' (the header's RFC 8941 string form,
// quotes included, unquoted as the HTTP middleware does) or -key order-42.
// A key that itself starts and ends with a quote (a gRPC or Go key) must
// be given in the string form: -key '"\"q\""' is the key "q".
// -scope is the scope the guarded call had: what the HTTP middleware's
// scope hook (nethttp.WithScope, and the gin and echo equivalents)
// returned for the request, the principal for gRPC, middleware.Scope's
// argument for Do and Execute; none by default, which is right for the
// HTTP middleware without a scope hook (its records are bound to the
// request's credentials instead). -namespace is the guard's
// (middleware.WithNamespace), "idempotency" by default. The record key in
// the backend is "<namespace>:<scope>:<key>", with ':' and '%' of the scope
// percent-encoded; inspect prints it.
//
// # URLs
//
// -url names the backend; it defaults to $IDEMKIT_URL, which keeps
// passwords off the command line (and out of the process list).
//
//	redis://[user:pass@]host:port[/db][?options]     one Redis node; rediss:// for TLS
//	redis+cluster://[user:pass@]host:port,host:port  Redis Cluster (any nodes; rediss+cluster:// for TLS)
//	redis+sentinel://[user:pass@]host:port,host:port/master-name[/db]
//	                                                 Sentinel failover (rediss+sentinel:// for TLS); the user and
//	                                                 password are the Sentinels'; the data nodes' go in the
//	                                                 username= and password= options
//	postgres://... or postgresql://...               PostgreSQL, any URL pgx accepts (sslmode, ...)
//	mysql://[user[:pass]@]host[:port]/database[?params]
//	                                                 MySQL or MariaDB (mariadb:// too); params are
//	                                                 go-sql-driver/mysql's DSN parameters (tls=true, ...)
//	firestore://project-id[/database]                Firestore; credentials come from the environment
//	                                                 (Application Default Credentials), and the client
//	                                                 follows FIRESTORE_EMULATOR_HOST
//	dynamodb://[region][?endpoint=URL]               DynamoDB; credentials and, without one in the URL,
//	                                                 the region come from the AWS configuration (the
//	                                                 environment, shared files, the instance's role);
//	                                                 endpoint= for another endpoint (DynamoDB Local)
//
// Redis options are go-redis's URL options (dial_timeout=3s, ...). The
// store options of the application must be repeated: -prefix for Redis
// (redisstore.WithKeyPrefix), -table for PostgreSQL (pgstore.WithTable,
// "table" or "schema.table"), MySQL (mysqlstore.WithTable, "table" or
// "database.table") and DynamoDB (dynamostore.WithTable), -collection for
// Firestore (firestorestore.WithCollection); each is refused with another
// backend.
//
// -timeout bounds the whole command, backend calls included (default 1m).
//
// # Output and exit status
//
// Text by default; -json prints one JSON object, for inspect and forget
// the operators' HTTP handler's (nethttp.NewAdmin) with a few members
// more (below):
//
//	$ idemkit inspect -url redis://localhost:6379/0 -key order-42 -scope tenant-1 -json
//	{"record_key":"idempotency:tenant-1:order-42","state":"completed","algorithm":"http-v2","bound":false,
//	 "fence":1767323045000,"created":"2026-01-02T03:04:05Z","expires":"2026-01-03T03:04:05Z","size":87,"sealed":false}
//	$ idemkit forget -url "$IDEMKIT_URL" -key order-42 -scope tenant-1 -json
//	{"deleted":true}
//	$ idemkit list -url "$IDEMKIT_URL" -scope tenant-1 -key-prefix order- -limit 2
//	STATE      EXPIRES               SIZE  SCOPE     KEY
//	completed  2026-01-03T03:04:05Z  87    tenant-1  order-42
//	claimed    2026-01-02T03:04:15Z  0     tenant-1  order-43
//	2 records; more may follow: add -after b3JkZXItNDM
//	$ idemkit sweep -url postgres://idemkit@db/app -json
//	{"deleted":1204}
//
// With -response, "response" holds the recorded bytes (base64) and one of
// "http" ({"status","header","body"}), "grpc" ({"code","message","details"}
// or {"message_type","message_size"}, with "header" and "trailer") or
// "value" the response decoded, a body or value as {"size","text"} or
// {"size","base64"}; "response_error" says why a response asked for is
// not shown. forget -json adds "state", what was deleted. list -json
// prints {"records":[...],"next":"CURSOR"}, each record inspect's without
// the response, with its "scope" and "key". Times are UTC, RFC 3339.
//
// The exit status is 0 when the command did its work (forget of a key
// without a record included: it prints that there was none), 1 when it
// failed, when inspect found no record or when forget refused a live
// claim without -force (stdout is then empty, stderr says so), and 2 for
// a bad command line (flags, URL, a key too long for the backend, an
// invalid namespace, table or collection, a cursor list did not make).
// list exits 0 also when it finds no record.
package main
