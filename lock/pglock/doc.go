// Package pglock is a [lock.Locker] on PostgreSQL, built on pgx v5. It
// passes the conformance suite in
// [github.com/idemkit/idemkit/lock/locktest] and also implements
// [lock.KeyedLocker].
//
// # Setup
//
// Create the tables once with [SetupSchema] (idempotent and safe to run
// from many processes at once), or apply the same DDL from the embedded
// schema.sql ([SchemaSQL]) with a migration tool. Table names are options
// ([WithTable], [WithFenceTable]), validated and always quoted; the
// defaults are idemkit_locks and idemkit_lock_fences.
//
//	pool, _ := pgxpool.New(ctx, url)
//	if err := pglock.SetupSchema(ctx, pool); err != nil { ... }
//	locker, err := pglock.New(pool)
//
// The client ([DB]) is a *pgxpool.Pool (the usual choice), a *pgx.Conn
// (one connection: never shared between goroutines) or a pgx.Tx (every
// operation becomes part of that transaction and takes effect when it
// commits; useful in tests and to take a lock together with other writes).
//
// # Tables
//
// The lock table holds one row per key: key (the storage key from
// [lock.StorageKey]: "k:" + the key when it is valid UTF-8 without NUL and
// at most 254 bytes, else "h:" + its SHA-256, so any byte sequence is a
// valid key), lock_id (unique index), acquired_at, expires_at (indexed, for
// Sweep), and user_key (the key itself when key holds its hash). The
// fence-counter table holds one row per key ever locked (key, fence, with a
// CHECK that fence <= [lock.FenceMax]); it is never deleted from, so fences
// survive release, expiry, cleanup, Sweep and restarts. A live lease's fence
// is its key's counter, which moves only when a lease is granted.
//
// # Time and liveness
//
// Expiry is judged by the server clock, clock_timestamp() (the time of
// reading, not NOW(), the start of the transaction), in SQL: a lease is
// live while clock_timestamp() < expires_at. Expired rows stay until an
// acquire replaces them, [Locker.Sweep] (or a sweeper, [Locker.StartSweeper])
// deletes them, or IsLocked's optional cleanup does.
//
// # Operations and round trips
//
// Every operation is one statement: one round trip, one implicit
// transaction.
//
//   - Acquire: if the key's row is live by the statement's snapshot, or
//     another acquire of the key holds the key's transaction-scoped advisory
//     lock (tried, never waited for), "locked": nothing written, no row
//     lock. Otherwise it inserts the lock row, or replaces it only if it is
//     expired once its row lock is held, then increments the fence counter;
//     times come from clock_timestamp() read after those locks, so
//     acquired_at grows with the fence. A fence past [lock.FenceMax] fails
//     the counter's CHECK and the whole statement: nothing is written.
//     Durable commit.
//   - Release, ReleaseKey: delete the live row by lock id (and key) and tell
//     "expired" from "not found"; asynchronous commit.
//   - Extend, ExtendKey: set expires_at to clock_timestamp() + ttl on the
//     live row; durable commit. An acquire and an extend racing at the
//     expiry serialise on the row lock and both judge liveness on the latest
//     row version: one of them fails, never both succeed.
//   - IsLocked, LookupKey, LookupID: reads (IsLocked with cleanup also
//     deletes the key's long-expired row, asynchronously committed).
//   - Sweep: DELETEs of at most [WithSweepBatch] expired rows each.
//
// Inside a caller's pgx.Tx, Acquire runs in a savepoint (two more round
// trips) so that a refused acquire leaves the transaction usable.
//
// The advisory locks live in PostgreSQL's one advisory-lock space, under
// 64-bit hashes of the storage keys (seeded with [SchemaLockID]). Another
// application's advisory lock on the same number, or a hash collision, can
// only make an acquire answer "locked" while that lock is held; it never lets
// two holders in.
//
// # Durability
//
// A fence is handed out only after the statement that incremented it
// committed durably (with the server's synchronous_commit, on by default).
// Releases, cleanups and sweeps commit asynchronously (synchronous_commit
// off for their own transaction only): a release lost in a crash only lets
// the lease run out, and this halves the WAL flushes of an acquire-release
// cycle. Inside a caller's pgx.Tx nothing changes its commit.
//
// # Errors
//
// Failures are [*idemkit.Error] values that unwrap to their code's sentinel and
// the native error (*pgconn.PgError, net.Error, ...). Serialization failures
// (40001), deadlocks (40P01), failures before anything was sent, and
// connection losses in repeatable operations (reads, extends, cleanups,
// sweeps) are retried inside the operation ([Retry]), up to three times with
// a short jittered back-off that stops when ctx ends. Mapping ([MapError]),
// by type and SQLSTATE:
//
//	ctx cancelled / deadline                          Aborted / NetworkTimeout
//	class 08, 57P01-57P05, 25006, 40001/40P01 after retries,
//	connect and net errors, io.EOF, closed pool       ServiceUnavailable
//	57014 query_canceled, 55P03, pgconn timeouts      NetworkTimeout
//	class 53 (insufficient resources)                 RateLimited
//	class 28, 42501                                   AuthFailed
//	42P01, 3F000, 42703 (run SetupSchema)             InvalidArgument
//	anything else                                     Internal
//
// # Building blocks for a co-located store
//
// A store that keeps its rows in the same database, on the same client, and
// should fail, retry and sweep the way the locker does, builds on the
// locker's own pieces instead of copying them; store/pgstore does:
//
//   - [DB]: the client interface (*pgxpool.Pool, *pgx.Conn, pgx.Tx).
//   - [Retry]: one statement, retried like the locker's, its last error
//     mapped by [MapError] (the table above).
//   - [ParseTableName], [TableName]: validated table names, always quoted.
//   - [SetupDDL]: idempotent DDL in one transaction under the advisory lock
//     [SchemaLockID].
//   - [SweepBatches]: deletion of expired rows in batches (the background
//     loop that runs it is [lock.SweepEvery]).
package pglock
