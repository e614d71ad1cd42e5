// Package mysqlstore is idemkit's MySQL and MariaDB engine, on
// database/sql with github.com/go-sql-driver/mysql: one InnoDB table of
// records that carry their own lease and fence ([store.Store]), serving
// the guard ([github.com/idemkit/idemkit/middleware]) and the lock library
// ([github.com/idemkit/idemkit/lock], whose locks are claims that carry
// the holder's lock id). It is also a [store.Records], a [store.Lister],
// a [store.Transactor] and a [store.Stepper].
//
//	if err := mysqlstore.SetupSchema(ctx, db); err != nil { ... } // or apply schema.sql (SchemaSQL)
//	s, err := mysqlstore.New(db) // a *sql.DB, a *sql.Conn or a *sql.Tx
//	defer s.StartSweeper(ctx, 0)()
//	guard, err := middleware.New(s) // idempotent requests
//	locks, err := lock.New(s)       // distributed locks with fencing
//
// Every operation is one statement, sent with its values as literals (one
// round trip whatever the DSN), that reads the server's UTC_TIMESTAMP(6),
// never a client clock: a replay costs one round trip, a first execution
// two. A claim is one CALL of the table's claim procedure, which
// schema.sql creates: a live record (a replay, or busy) is answered by a
// consistent read alone, no lock and no write. Extend, Complete, Release
// and Delete are single UPDATEs that report what they did through
// LAST_INSERT_ID(expr), and so is RecordStep, which appends a step to the
// claim's row (a column that stays NULL without steps); a take-over of a
// dead claim or of a release's tombstone of the same fingerprint carries
// its steps within the same CALL. Rows and the tombstones of releases and deletions
// are kept as the fence rule of [store.Store] says, with
// [WithMaxClockStep]; [Store.Sweep] removes them after. MySQL cannot
// notify: waiters poll with the guard's and the lock library's back-off.
// Guarded work that writes to the same database commits its writes with
// its record, exactly once ([Tx]), and a step of it may commit its own
// writes with its recovery point. Failures are [idemkit.Error] values
// mapped by error number and type.
//
// It runs on MariaDB 10.6 and later and MySQL 8.0.29 and later. The
// repository's docs/backends.md (section MySQL and MariaDB) describes the
// table, statements, transactions, what the engine relies on and where the
// two servers differ.
package mysqlstore
