// Package pgstore is a [store.Store] on PostgreSQL, built on pgx v5 and on
// the building blocks of [github.com/idemkit/idemkit/lock/pglock] (client
// interface, retries, error mapping, table names, schema setup, sweeping).
// It passes the conformance suite in
// [github.com/idemkit/idemkit/store/storetest]. Pair it with pglock (or any
// locker) in the guard.
//
// # Setup
//
// Create the table once with [SetupSchema] (idempotent and safe to run
// from many processes at once), or apply the same DDL from the embedded
// schema.sql ([SchemaSQL]) with a migration tool. The table name is an
// option ([WithTable]), validated and always quoted; the default is
// idemkit_records.
//
//	if err := pgstore.SetupSchema(ctx, pool); err != nil { ... }
//	records, err := pgstore.New(pool)
//
// The client ([DB]) is a *pgxpool.Pool (the usual choice), a *pgx.Conn
// (one connection: never shared between goroutines) or a pgx.Tx.
//
// # Table
//
// One row per record: key (the storage key from [lock.StorageKey]: "k:" +
// the key when it is valid UTF-8 without NUL and at most 254 bytes, else
// "h:" + its SHA-256, so any byte sequence is a valid key), fingerprint,
// state, response (bytea), fence, created_at, expires_at, with an index on
// expires_at for [Store.Sweep].
//
// # Operations
//
// Get is one read; a record is visible while clock_timestamp() <
// expires_at (the server clock judges expiry). Put is one fenced upsert
// (INSERT ... ON CONFLICT DO UPDATE ... WHERE the stored fence is not
// higher or the stored row has expired), with a durable commit: it is
// refused only when the live stored record carries a higher fence. Delete
// is one statement. Responses above the maximum ([WithMaxResponseBytes],
// default 8 MiB) are refused with [store.ErrTooLarge] before any I/O.
// Expired rows are deleted by [Store.Sweep] or a sweeper
// ([Store.StartSweeper]), in batches, with asynchronous commits.
//
// # Errors
//
// The store fails, retries and sweeps the way pglock's locker does, with
// pglock's building blocks rather than a copy of them. Failures are
// [idemkit.Error] values that unwrap to their code's sentinel and the native
// pgx error, mapped by type and SQLSTATE by [pglock.MapError] (see its
// table): connection losses are ServiceUnavailable, 57014 NetworkTimeout,
// class 53 RateLimited, class 28 AuthFailed, a missing table
// InvalidArgument (run SetupSchema), anything else Internal; an ended ctx
// is Aborted or NetworkTimeout. Each statement runs through
// [pglock.Retry]: serialization failures, deadlocks and failures before
// anything was sent are retried inside the operation a few times, and so
// are connection losses of the operations that are safe to repeat (Get,
// Put, Sweep; not Delete); inside a caller's pgx.Tx nothing is retried.
package pgstore
