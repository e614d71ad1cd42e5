// Package pgstore is idemkit's PostgreSQL engine, on pgx v5: one table of
// records that carry their own lease and fence ([store.Store]), serving
// the guard ([github.com/idemkit/idemkit/middleware]) and the lock library
// ([github.com/idemkit/idemkit/lock], whose locks are claims that carry
// the holder's lock id). It is also a [store.Records], a [store.Watcher]
// and a [store.Lister].
//
//	if err := pgstore.SetupSchema(ctx, pool); err != nil { ... } // or apply schema.sql (SchemaSQL)
//	s, err := pgstore.New(pool) // a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx
//	defer s.StartSweeper(ctx, 0)()
//	guard, err := middleware.New(s) // idempotent requests
//	locks, err := lock.New(s)       // distributed locks with fencing
//
// Every operation is one statement that reads the server's
// clock_timestamp(), never a client clock: a replay costs one round trip,
// a first execution two (a claim and a completion, each one durable
// commit). A claim answered by a live record (a replay, or busy) is one
// read-only SELECT (no row lock, no WAL), so waiters cost the server a
// read each; other claims go on, in the same statement, to the table's
// claim function, which schema.sql creates. Release commits
// asynchronously (a release lost in a crash only lets its lease run out).
// Rows and the tombstones of releases and deletions are kept as the fence
// rule of [store.Store] says, with [WithMaxClockStep]; [Store.Sweep]
// removes them after. A claim's steps ([store.Stepper]) live in its row
// (one column, NULL when there are none, so that records without steps
// cost what they did): [Store.RecordStep] is one fenced UPDATE, and a claim
// that takes over the dead claim of the same fingerprint carries them in
// the same statement. Waiters are woken by LISTEN/NOTIFY on one connection
// per store ([Store.Watch]). Guarded work that writes to the same database
// commits its writes with its record, exactly once ([Tx]), and each of its
// steps may commit its own writes with its recovery point
// ([store.StepWork]). Failures are [idemkit.Error] values mapped by
// SQLSTATE and error type.
//
// The repository's docs/backends.md (section PostgreSQL) describes the
// table, statements, notifications, transactions, retries and error
// mapping in full.
package pgstore
