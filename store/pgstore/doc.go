// Package pgstore is idemkit's PostgreSQL engine, built on pgx v5: one
// table of records that carry their own lease and fence ([store.Store]),
// serving both the guard ([github.com/idemkit/idemkit/middleware]) and the
// lock library ([github.com/idemkit/idemkit/lock]), whose locks are claims
// that carry the holder's lock id (found by [Store.FindClaim]). It is also
// a plain fenced record store ([store.Records]) for
// [github.com/idemkit/idemkit/middleware.Compose], a [store.Watcher] and a
// [store.Lister], and passes the conformance suites storetest and
// locktest.
//
//	if err := pgstore.SetupSchema(ctx, pool); err != nil { ... } // or apply schema.sql (SchemaSQL)
//	s, err := pgstore.New(pool)
//	defer s.StartSweeper(ctx, 0)()
//	guard, err := middleware.New(s) // idempotent requests
//	locks, err := lock.New(s)       // distributed locks with fencing
//
// The client ([DB]) is a *pgxpool.Pool (the usual choice), a *pgx.Conn
// (never shared between goroutines) or a pgx.Tx (every operation joins
// that transaction).
//
// Every operation is one statement that reads the server's
// clock_timestamp(), never a client clock: a replay costs one round trip,
// a first execution two. A refused claim is read-only (no row lock, no
// transaction id, no WAL), so waiting duplicates and lock waiters cost the
// server a read each. Complete commits durably; Release commits
// asynchronously, since a release lost in a crash only lets its lease run
// out. Fences follow the rule of [store.Store]: every row, and the
// tombstone a release or a deletion leaves, is kept until the server's
// clock passes its fence plus the largest clock step ([WithMaxClockStep]);
// [Store.Sweep] removes the rows past that.
//
// Waiters are woken by LISTEN/NOTIFY on one connection per store, whatever
// their number ([Store.Watch]); only claims that someone waits for notify.
// Guarded work whose writes go to the same database commits them with its
// record, exactly once ([Tx]). Failures are [idemkit.Error] values, mapped
// by SQLSTATE and error type, never by message text.
//
// The repository's docs/backends.md (section PostgreSQL) describes the
// table, the statements, notifications, transactions, retries and the
// error mapping in full.
package pgstore
