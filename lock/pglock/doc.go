// Package pglock is a [lock.Locker] on PostgreSQL, built on pgx v5. It
// passes the conformance suite in
// [github.com/idemkit/idemkit/lock/locktest] and also implements
// [lock.KeyedLocker] and [lock.Watcher]: a [lock.Do] waiter is woken by
// the release it waits for (LISTEN/NOTIFY) instead of sleeping out its
// back-off.
//
// # Setup
//
// Create the table once with [SetupSchema] (idempotent and safe to run
// from many processes at once), or apply the same DDL from the embedded
// schema.sql ([SchemaSQL]) with a migration tool. The table name is an
// option ([WithTable]), validated and always quoted; the default is
// idemkit_locks.
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
// # The table
//
// One row per key: key (the storage key from [github.com/idemkit/idemkit/lock/provider.StorageKey]: "k:" + the
// key when it is valid UTF-8 without NUL and at most 254 bytes, else "h:" +
// its SHA-256, so any byte sequence is a valid key), lock_id (unique index;
// NULL in a tombstone), fence (with a CHECK that it is at most
// [idemkit.FenceMax]), acquired_at, expires_at (indexed, for Sweep) and
// user_key (the key itself when key holds its hash).
//
// # Fences
//
// No counter is kept. A new lease's fence is the greater of the fence on
// the key's row + 1 (0 without a row) and the server clock in Unix
// milliseconds ([github.com/idemkit/idemkit/lock/provider.NextFence]): about 1.8e12 today, far below
// [idemkit.FenceMax], growing with time, and by one when leases follow each
// other within a millisecond. A row is never deleted before the server clock has passed
// its fence, read as Unix milliseconds ([github.com/idemkit/idemkit/lock/provider.KeepUntil]): a release before
// that leaves a tombstone (the fence alone: not live, not found by lock id,
// acquirable) whose expires_at is that instant. So after a release, an
// expiry, a sweep or a restart, the key's next fence is still greater than
// every fence it had, and nothing lives for ever: every row has an expiry,
// and [Locker.Sweep] deletes the rows past it.
//
// The server clock must not be stepped back by more than the time between
// a row's deletion and the key's next acquire; a fence derived from a clock
// that went back could repeat one.
//
// # Time and liveness
//
// Expiry is judged by the server clock, clock_timestamp() (the time of
// reading, not NOW(), the start of the transaction), in SQL: a lease is
// live while clock_timestamp() < expires_at. Expired rows stay until an
// acquire takes them over, [Locker.Sweep] (or a sweeper,
// [Locker.StartSweeper]) deletes them, or IsLocked's optional cleanup does.
//
// # Operations and round trips
//
// Every operation is one statement: one round trip, one implicit
// transaction.
//
//   - Acquire: if a live lease holds the key by the statement's snapshot,
//     or another acquire of the key holds the key's transaction-scoped
//     advisory lock (tried, never waited for), "locked": nothing written,
//     no row lock, no transaction id, no WAL. Otherwise it inserts the row,
//     or takes it over only if it is a tombstone or an expired lease once
//     its row lock is held, with the fence above; times come from
//     clock_timestamp() read after those locks, so acquired_at grows with
//     the fence. A fence past [idemkit.FenceMax] fails the CHECK and the whole
//     statement: nothing is written. Durable commit.
//   - Release, ReleaseKey: end the live lease by lock id (and key) and tell
//     "expired" from "not found": delete the row, or leave a tombstone as
//     above, and notify the key's watchers (pg_notify, in the same
//     statement); asynchronous commit.
//   - Extend, ExtendKey: set expires_at to clock_timestamp() + ttl on the
//     live row; durable commit. An acquire and an extend racing at the
//     expiry serialise on the row lock and both judge liveness on the latest
//     row version: one of them fails, never both succeed.
//   - IsLocked, LookupKey, LookupID: reads (IsLocked with cleanup also
//     deletes the key's row when Sweep would, asynchronously committed).
//   - Sweep: DELETEs of at most [WithSweepBatch] rows each.
//
// Every statement that deletes a row first tries the key's advisory lock,
// the one an acquire holds from before it reads the clock until it commits,
// and leaves the row (a release: as a tombstone) when it is taken; so no
// acquire can insert a fresh row with a clock read before the deletion.
//
// Inside a caller's pgx.Tx, Acquire runs in a savepoint (two more round
// trips) so that a failed acquire leaves the transaction usable.
//
// The advisory locks live in PostgreSQL's one advisory-lock space, under
// 64-bit hashes of the storage keys (seeded with the number of SetupSchema's
// advisory lock, which schema.sql names). Another application's advisory
// lock on the same number, or a hash collision, can only make an acquire
// answer "locked" (or a deletion wait for a later sweep) while that lock is
// held; it never lets two holders in.
//
// # Waiting: notifications
//
// Every release notifies, in its own statement and transaction:
// pg_notify on the table's channel (its name as [WithTable] spells it,
// "idemkit_locks" by default, shortened with a hash past PostgreSQL's 63
// bytes) with the row's key as payload, delivered when the release
// commits and never if it does not. It adds no round trip; PostgreSQL
// briefly serialises the commits of notifying transactions, which the
// release's asynchronous commit keeps short. Inside a caller's pgx.Tx the
// notification goes out when that transaction commits.
//
// [Locker.Watch] (which [lock.Do] uses between attempts) listens on one
// connection per locker, however many keys and waiters there are: a
// connection taken from the *pgxpool.Pool for good (and so subject to the
// pool's hooks), or, for a locker on a *pgx.Conn, a second connection
// opened with its settings. It is started by the first watch and closed
// once no watch has needed it for about 10 s. Notifications are fanned
// out in the process to the watches of their key, and a release through
// the locker itself wakes the key's watches in the process as soon as it
// returns, before its notification arrives. A watch reads its key once
// the listener is up, so a release committed before it was in place is
// not missed; the watches of one key that arrive while such a read is in
// flight share the next one. A watch also fires when the lease it read
// runs out: expiry sends no notification.
//
// The waiters of a hot key, woken together, then try the lock together:
// their acquires share one statement (see [Locker.Acquire]), so a release
// costs the process a few statements, not one per waiter.
//
// Notifications can be lost (the listening connection dropped, a
// connection pooler in transaction mode, which does not carry LISTEN):
// every waiter keeps its back-off as a fallback, so a lost notification
// delays it by that back-off, never past its timeout. After a lost
// connection the listener reconnects at once, then with a back-off from
// 100ms to 5s, and wakes every watch once, spuriously, since a
// notification may have gone missing. A locker on a pgx.Tx does not
// listen; its waiters poll.
//
// # Deadlines
//
// Every call, SetupSchema and Sweep included, runs under its ctx: when the
// ctx ends, pgx interrupts the statement (closing the connection if it has
// to) and the call fails with NetworkTimeout (deadline) or Aborted
// (cancelled), also against a server that stopped answering. Give every
// ctx a deadline: the locker adds none of its own. (Watch waits at most a
// second for the listener to come up; the listener, which serves no one
// call, bounds its own connection attempts to 5 s and checks its
// connection every 10 s.)
//
// # Durability
//
// A fence is handed out only after the statement that wrote it committed
// durably (with the server's synchronous_commit, on by default). Releases,
// cleanups and sweeps commit asynchronously (synchronous_commit off for
// their own transaction only): a release lost in a crash only lets the
// lease run out, and this halves the WAL flushes of an acquire-release
// cycle. Inside a caller's pgx.Tx nothing changes its commit.
//
// # Errors
//
// Failures are [*idemkit.Error] values that unwrap to their code's sentinel
// and the native error (*pgconn.PgError, net.Error, ...). Serialization
// failures (40001), deadlocks (40P01), failures before anything was sent,
// and connection losses in repeatable operations (reads, extends,
// cleanups, sweeps) are retried inside the operation, up to three times
// with a short jittered back-off that stops when ctx ends. Mapping, by type
// and SQLSTATE class:
//
//	ctx cancelled / deadline                          Aborted / NetworkTimeout
//	class 08, 57P01-57P05, 25006, 40001/40P01 after retries,
//	connect and net errors, io.EOF, closed pool       ServiceUnavailable
//	57014 query_canceled, 55P03, pgconn timeouts      NetworkTimeout
//	class 53 (insufficient resources)                 RateLimited
//	class 28, 42501                                   AuthFailed
//	42P01, 3F000, 42703 (run SetupSchema)             InvalidArgument
//	anything else                                     Internal
package pglock
