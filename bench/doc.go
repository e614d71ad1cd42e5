// Package bench compares idemkit with peer libraries and with the plain
// backend in one run against the same servers: the Redis lock
// (acquire+release cycles) side by side with github.com/bsm/redislock and
// github.com/go-redsync/redsync/v4 on one connection pool, the PostgreSQL
// lock side by side with pg_try_advisory_lock/pg_advisory_unlock, each
// store's calls against the same round trips as plain commands on its
// backend (the limit), and the HTTP demo handler under load from a
// separate process, on net/http with and without the middleware and on
// Fiber v3 with and without its idempotency middleware.
//
// It is a module of its own and is never tagged. `scripts/bench.sh` runs the
// full comparison and writes the markdown tables into bench/README.md;
// `make test` runs the same scenarios briefly, as a smoke test that every
// library and configuration completes its cycles correctly.
package bench
