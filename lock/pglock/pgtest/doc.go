// Package pgtest holds the test helpers for code built on pglock against a
// real PostgreSQL server: pglock's and pgstore's own tests use it, and so
// can the tests of a store of your own that keeps its tables next to the
// locker's.
//
// It gives pools and connections closed when the test ends ([NewPool],
// [Connect]), a schema of the test's own ([Schema]), a single *pgx.Conn
// that racing goroutines can share ([SerialConn]), and the checks that a
// shipped schema.sql is the DDL its SetupSchema runs ([SchemaSQLMatches],
// [AppliesLikeSetup], [Catalog]) and that SetupSchema may run from several
// processes at once ([SetupConcurrently]).
//
// Every helper talks to the server it is given; nothing stands in for it.
// Point them at a server of your own (a URL such as
// postgres://user@127.0.0.1:5432/db?sslmode=disable), on which the user may
// create schemas. Schema names come from the test's name, so tests may run
// in parallel on one database.
//
// It uses the standard testing package, pgx and idemkit's test
// environment (for the unique names) only.
package pgtest
