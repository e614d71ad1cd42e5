// Package pgstore is the guard's backend on PostgreSQL, built on pgx v5:
// records that carry their own lease ([store.Store]), one row per record
// key, in one table. A replay costs one statement (one round trip), a first
// execution two (claim, then complete). It also implements the plain
// fenced record store [store.Records] (Get, Put, Delete) for
// [github.com/idemkit/idemkit/middleware.Compose]. It passes the conformance suite in
// [github.com/idemkit/idemkit/store/storetest].
//
// # Setup
//
// Create the table once with [SetupSchema] (idempotent and safe to run
// from many processes at once), or apply the same DDL from the embedded
// schema.sql ([SchemaSQL]) with a migration tool. The table name is an
// option ([WithTable]), validated and always quoted; the default is
// idemkit_records. Run a sweeper in one process or more
// ([Store.StartSweeper]), or call [Store.Sweep] from a job of your own.
//
//	if err := pgstore.SetupSchema(ctx, pool); err != nil { ... }
//	s, err := pgstore.New(pool)
//	defer s.StartSweeper(ctx, 0)()
//	guard, err := middleware.New(s)
//
// The client ([DB]) is a *pgxpool.Pool (the usual choice), a *pgx.Conn
// (one connection: never shared between goroutines) or a pgx.Tx. A store
// on a pool also takes one connection out of it, on the first wait for a
// running duplicate, to listen for notifications (see Waiting duplicates),
// and opens one more, outside it, while guarded work holds a transaction
// (see Exactly-once effects).
//
// # Table
//
// Columns: key, fingerprint (bytea), state (smallint: 1 claimed, 2
// completed, 3 executed but not replayable, 0 a tombstone), response
// (bytea: an outcome's response, empty for a not-replayable one unless its
// writer gave one, as [store.Seal] does), fence (bigint), created_at, expires_at (a claim: the end of its
// lease; an outcome: when it is forgotten) and keep_until (when [Store.Sweep]
// may delete the row), with an index on keep_until.
//
// The key column (text, collation "C") holds the record key itself when it
// is printable ASCII (bytes 0x20 to 0x7E) and does not start with `\x`, so
// that an operator finds a guard's record with
//
//	SELECT * FROM idemkit_records WHERE key = 'idempotency:tenant-1:order-42';
//
// Any other key (NUL, invalid UTF-8, other Unicode, or a leading `\x`) is
// stored as `\x` followed by the lowercase hex of its bytes, PostgreSQL's
// own notation for bytes ('\x' || encode(convert_to('ключ', 'UTF8'),
// 'hex')): exact, reversible, and never equal to a verbatim key, so no two
// keys share a row, in any server encoding. [Store.List] (operators
// listing the records under a prefix) reads both forms, by ranges of the
// primary key.
//
// Time is the server's: every statement reads clock_timestamp(); no client
// clock is ever used. A row is visible (to Get, and answered by Claim as
// busy or as an outcome) while its state is not 0 and clock_timestamp() <
// expires_at.
//
// # Operations
//
// Every operation is one statement, so one round trip (Sweep: one per
// batch; Watch: one, by the process's first watch of a claim).
//
// Claim is a single statement of data-modifying CTEs that reads the key's
// row and then either inserts a claim (no row), takes the row over in
// place (a tombstone, a claim whose lease ran out, an outcome past its
// expiry), or returns the row as it is (a live claim: busy; an outcome). A
// refused claim is read-only: it writes nothing, locks nothing and takes no
// transaction id, so waiting duplicates that poll a busy key cost the
// server a read each (an upsert whose WHERE is false would lock the row and
// write WAL every time). Of racing claims on a free or claimable key, one
// wins and each loser answers with the winner's claim in the same
// statement (reading a row committed after its snapshot takes a no-op ON
// CONFLICT DO UPDATE, or a FOR SHARE lock, in those races only). A new
// claim's fence is max(previous fence + 1, the server's clock in Unix
// milliseconds). A take-over of a row that still held a response answers,
// in the same row, with that response and its fingerprint
// ([store.Record].Replaced).
//
// Extend, Complete and Release are one UPDATE each, guarded by the key,
// the claim's fence and the claimed state; Complete and Extend work after
// the lease ran out as long as nobody claimed the key since. Complete
// commits durably; a Complete repeated with the same outcome under the
// same fence (its first answer lost with a connection) is reported done.
// Release and Delete leave a tombstone (state 0, the fence kept, nothing
// visible) that the next claim takes over; Release commits asynchronously
// (synchronous_commit off for its own transaction, set in the same
// statement; not inside a caller's pgx.Tx): a release lost in a crash only
// lets its claim run out. Get is one read. Put is one fenced upsert.
// Responses above the maximum ([WithMaxResponseBytes], default 8 MiB) are
// refused with [store.ErrTooLarge] before any I/O.
//
// Complete, Release and Delete of a claim that a duplicate waits for also
// notify, in the same statement (see Waiting duplicates).
//
// Nothing lives forever: every row has a keep_until, at least its
// expires_at (a claim: [store.ClaimRetention] past it, so that a holder
// whose database was unreachable for a while still completes), and past
// its fence read as Unix milliseconds, so that a later claim's
// clock-derived fence is greater (see [store.Store]); tombstones are kept
// a minute. [Store.Sweep] deletes the rows past it.
//
// The first time a pooled connection runs one of the store's statements,
// pgx prepares it (one more round trip, once per connection and
// statement), unless the pool is configured otherwise.
//
// # Waiting duplicates
//
// The store is a [store.Watcher]: a duplicate that waits for a running
// request is woken by PostgreSQL's LISTEN/NOTIFY when that request's claim
// ends, instead of sleeping out its poll interval ([Store.Watch]).
//
//   - The channel is one per table: "idemkit:" followed by the table name
//     as configured (idemkit:idemkit_records by default; a name too long for
//     PostgreSQL's 63 bytes is shortened and suffixed with a hash). The
//     payload is the key column's value (the key, or its `\x` hex form), at
//     most 2,050 bytes.
//   - Each store listens on one connection of its own, whatever the number
//     of waiting requests: every watch of the process shares it, and the
//     watches of one key share one Go channel. It is opened by the first Watch,
//     which returns once LISTEN is active, and closed a minute after the
//     last watch ended. On a *pgxpool.Pool the connection is taken out of
//     the pool (Acquire, then Hijack: the pool may open another in its
//     place); on any other client it comes from [WithListenConn], or there
//     is none (nor ever on a pgx.Tx), and Watch returns a channel that
//     never closes.
//   - The first watch of a claim in a process marks the claim as waited
//     for: one UPDATE, committed asynchronously, that sets the claim's
//     response column (unused while claimed) to the byte 0x01 (a claim
//     already ended is reported at once). Complete, Release and Delete of a
//     marked claim call pg_notify in their own statement, so a notification
//     costs no round trip and is delivered when the claim's end commits;
//     so does a Claim that takes over a marked claim whose lease ran out
//     (its waiters then watch the new claim). A
//     claim nobody waits for notifies nothing: a committing transaction that
//     notifies holds a lock shared by the whole server until its commit is
//     flushed, which would serialise the durable commits of every first
//     execution (measured: concurrent completions at a fraction of their
//     rate).
//   - A lost connection (pg_terminate_backend, a server restart) is opened
//     again with back-off (50 ms doubling to 5 s); once it listens again,
//     every watch is woken once, since notifications may have been lost.
//     A duplicate re-reads the record after every wake-up and keeps
//     polling as a fallback, so a lost notification delays it by at most
//     its poll interval, never past its wait budget. A half-open connection
//     is noticed only by TCP keepalive; duplicates poll meanwhile.
//   - A listening connection that stops reading (a frozen process) makes
//     PostgreSQL keep every later notification of the database in its queue
//     (8 GB at most, then notifying statements fail): the store reads
//     continuously, and pg_notification_queue_usage() shows the queue's use.
//   - Behind a proxy that pools connections per transaction, LISTEN does
//     not last: turn listening off with WithListenConn(nil).
//
// # Exactly-once effects: the work's writes commit with its record
//
// The guard makes work run at most once per key; when the work writes to
// the same database as the records, this store also makes its writes
// happen exactly once. Guarded work that calls [Tx] gets a transaction
// (begun on first use, on a connection of the pool); the guard completes
// the record inside it, under the claim's fence, and commits both at once:
//
//	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
//		tx, err := pgstore.Tx(r.Context())
//		if err != nil { ... }
//		var id int64
//		err = tx.QueryRow(r.Context(), `INSERT INTO orders (item) VALUES ($1) RETURNING id`, item).Scan(&id)
//		if err != nil { ... } // answer 500: the guard rolls the transaction back
//		w.WriteHeader(http.StatusCreated)
//		fmt.Fprintf(w, `{"id":%d}`, id)
//	})
//
// What it guarantees:
//   - A process that dies before the commit leaves neither the order nor
//     the record: the retry (once the dead process's lease has run out)
//     runs the work again, on a database without its writes. Once the
//     commit is in, both are there, and the retry replays. Without Tx, a
//     crash between the work's own commit and the record's completion
//     leaves an order without a record, and the retry writes it again.
//   - A holder whose claim was taken over while its work ran (its lease
//     ran out, another process claimed the key) cannot commit: the
//     record no longer carries its fence, its transaction is rolled back,
//     and its call fails with middleware.UnavailableError wrapping
//     idemkit.ErrLeaseLost (503 over HTTP).
//   - A holder whose lease was lost before its work returned (its
//     renewals failed until the lease ran out, and the work's ctx ended
//     with idemkit.ErrLeaseLost) does not commit either, even when nobody
//     claimed the key meanwhile: its transaction is rolled back, its
//     claim released, and its call fails the same way. (Without Tx, its
//     outcome is still completed, as Complete allows while nobody
//     claimed the key since.)
//   - Work that returns an error, panics, answers with a status the
//     adapter does not store (an HTTP 5xx) or calls
//     middleware.DoNotRecord is rolled back, and its claim released:
//     nothing of it remains, and a retry runs it again.
//   - A response that cannot be replayed (streamed, too large) is
//     committed with the writes as executed-not-replayable.
//   - A transaction that fails by itself is the work's failure, not the
//     backend's: left aborted by a statement the work let fail (SQLSTATE
//     25P02; go on after a failed statement only from a savepoint,
//     tx.Begin), or refused at COMMIT by a deferred constraint or trigger
//     (class 23, say 23503), it fails the call with an error matching
//     store.ErrWorkFailed (HTTP 500 transaction-failed, gRPC Internal);
//     having lost a serialization failure or a deadlock (40001, 40P01),
//     with store.ErrWorkConflict (HTTP 409 transaction-conflict with
//     Retry-After, gRPC Aborted): a retry may succeed. Either way it was
//     rolled back, the claim is released (a retry runs the work again),
//     and the guard logs the cause, SQLSTATE included.
//   - nethttp (and gin and echo) hold a response written once the
//     transaction began and send it only after the commit: a client never
//     sees a success whose writes were rolled back (it gets the answer of
//     the failure instead, without the handler's headers). The response
//     is held up to nethttp.WithMaxResponseBytes (1 MiB by default): past
//     it, the handler's writes fail and the work is rolled back (500
//     transaction-response-too-large), so memory stays bounded and no
//     truncated success goes out. gRPC sends the response after the
//     guard returns, so after the commit, and holds the header and
//     trailer metadata set once the transaction began until then: a
//     failed commit is answered without any of it, and a response message
//     over grpcinterceptor.WithMaxResponseBytes is rolled back (Internal).
//     middleware.Do returns after the commit.
//
// An answer the adapter records (an HTTP 4xx by default, a gRPC status its
// policy stores) commits what the work wrote before it: validate before
// writing, or call middleware.DoNotRecord to roll back and let a retry run
// again. On gin, pass c.Request.Context() to Tx.
//
// What it does not: effects outside this database (e-mails, payments
// with another provider, messages) happen when the work makes them,
// whatever becomes of the transaction. Give them the claim's fence
// (middleware.CallInfoFrom) so the other side can refuse a stale holder,
// or write them to an outbox table in the same transaction and send them
// from there. The work's tables must be in the records' database. A
// response written, or gRPC metadata set, before the work calls Tx goes
// out whatever becomes of the transaction: call Tx first.
// Work that never calls Tx pays nothing: the claim is completed as usual.
//
// Isolation: read committed by default, set on each BEGIN whatever the
// server's default ([WithTxIsolation]: repeatable read or serializable).
// Above read committed, Tx first marks the claim as waited for (one more
// statement, before the transaction's snapshot; the commit then notifies):
// a waiting duplicate's mark would otherwise change the record's row
// after the snapshot, and the completion, which writes that row, would
// fail with a serialization failure. Duplicates then only read the row,
// and never make the holder's commit fail. A renewal of the claim's lease
// changes the row too, and cannot be moved out of the way: above read
// committed, work must end before its first renewal (a third of the
// guard's lease TTL, middleware.WithLeaseTTL); work that runs past it
// fails at its commit (store.ErrWorkFailed), with a detail that says so.
//
// Connections: the transaction holds a pool connection for as long as the
// work runs. The renewals of its claim's lease do not wait for another
// one behind it (with as many long transactional requests as the pool has
// connections, they would wait until the leases ran out): they run on one
// connection of the store's own, outside the pool, opened with the pool's
// (or the *pgx.Conn's) configuration when a first work begins its
// transaction and closed a minute after the last one ended (pgxpool's
// BeforeConnect and AfterConnect hooks do not run on it). Claims and
// completions of other requests still need a connection of the pool: a
// statement that times out while every connection is in use fails with
// NetworkTimeout and a detail saying that the pool is too small (naming
// pgxpool.Config.MaxConns), logged the first time. Size the pool above
// the number of transactional requests that run at once.
//
// A unique constraint on the work's table (an order number, the
// idempotency key itself) meets a takeover this way: the taker's insert
// of a value the first holder inserted blocks on the first holder's
// uncommitted row until that transaction ends. It ends when the first
// holder's work returns (the guard then rolls it back, its lease being
// lost), when its ctx ends (with the lease) while one of its statements
// runs (pgx then closes the connection), or when its process dies;
// the taker's insert then goes on, and its work commits. A first holder
// stuck outside the database (ignoring its ctx) holds the taker up for as
// long; the taker's lease is renewed meanwhile, and SET LOCAL
// lock_timeout in its transaction, or the request's deadline, bounds the
// wait. A first holder that inserts after the taker waits for the taker's
// row instead and, once the taker commits, fails with a unique violation
// (SQLSTATE 23505): either way, one row.
//
// # Errors
//
// Failures are [idemkit.Error] values that unwrap to their code's sentinel
// and to the native pgx error, mapped by type and SQLSTATE, never by
// message text: an ended ctx is Aborted or NetworkTimeout; connection
// losses, a closed pool and an unreachable server are ServiceUnavailable;
// 57014 (statement_timeout) and 55P03 (lock_timeout) NetworkTimeout; class
// 53 (out of connections, memory or disk) RateLimited; class 28 and 42501
// AuthFailed (42501 names the grants the role needs); a missing table,
// schema or column Misconfigured (run SetupSchema, or apply schema.sql);
// anything else Internal. Every
// statement runs under the caller's ctx: pgx ends a statement whose ctx
// ends by closing its connection, so a stalled server gives NetworkTimeout
// by the ctx's deadline (a statement already sent may still run when the server comes
// back). Serialization failures, deadlocks, failures before anything was
// sent and lost connections (a pooled connection that died while idle,
// most often) are retried inside the operation, up to three times, except a
// lost connection in Delete; inside a caller's pgx.Tx nothing is retried.
// Should a claim whose connection was lost have been made, its retry finds
// it and answers busy until its lease runs out: a delay, never a second
// execution. The failures of guarded work's own transaction at its commit
// are told apart from the backend's (store.ErrWorkFailed,
// store.ErrWorkConflict; see Exactly-once effects).
package pgstore
