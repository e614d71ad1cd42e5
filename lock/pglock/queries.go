package pglock

import (
	"strconv"
	"strings"

	"github.com/idemkit/idemkit/lock"
)

// queries holds the locker's SQL, built once with its table names.
type queries struct {
	acquire         string
	release         string
	releaseKey      string
	extend          string
	extendKey       string
	isLocked        string
	isLockedCleanup string
	lookupKey       string
	lookupID        string
	sweep           string
}

// asyncCommit is a FROM item that turns synchronous_commit off for the
// statement's own transaction (set_config with is_local), so its commit does
// not wait for the WAL flush. It is left out inside a caller's transaction,
// whose commit it would otherwise weaken.
const asyncCommit = `(SELECT set_config('synchronous_commit', 'off', true)) AS async_commit`

// advisorySeed seeds the 64-bit hash (hashtextextended) of a storage key
// that names the key's transaction-scoped advisory lock during an acquire:
// the decimal form of SchemaLockID. Another application's advisory lock on
// the same number, or a hash collision between two keys, can only make an
// acquire answer "locked" for the instant the other lock is held; it never
// lets two holders in.
const advisorySeed = "7594306392281412641"

// ttlExpr turns a parameter (or a literal) holding microseconds into an
// interval.
func ttlExpr(param string) string { return "(" + param + "::bigint * interval '1 microsecond')" }

func buildQueries(n names, async bool) queries {
	locks, fences := n.locks.Sanitize(), n.fences.Sanitize()
	from := func(prefix string) string {
		if !async {
			return ""
		}
		return prefix + asyncCommit
	}
	r := strings.NewReplacer("{{locks}}", locks, "{{fences}}", fences)
	grace := ttlExpr(strconv.FormatInt(micros(lock.CleanupGrace), 10)) // a constant
	q := queries{
		// One statement, one implicit transaction. admitted yields a row
		// only when the key is free by the statement's snapshot (a plain
		// read: a held key costs no write and no row lock) and the
		// transaction-scoped advisory lock on the key's hash was free (one
		// acquirer of a key at a time; the others answer "locked" at once,
		// so releasing a hot key starts no thundering herd); its
		// clock_timestamp() is read after that lock. up takes the lock
		// row only if it is expired once its row lock is held: the WHERE
		// of DO UPDATE runs on the locked, latest row version (with a
		// fresh clock_timestamp()), so a concurrent extend either commits
		// first and keeps its lease, or finds the new lock id and fails.
		// next increments the fence counter only if up took the row; past
		// lock.FenceMax its CHECK constraint fails the whole statement,
		// so nothing is written.
		acquire: `WITH admitted AS MATERIALIZED (
	SELECT clock_timestamp() AS now
	WHERE NOT EXISTS (SELECT 1 FROM {{locks}} WHERE key = $1 AND expires_at > clock_timestamp())
	AND pg_try_advisory_xact_lock(hashtextextended($1, ` + advisorySeed + `))
), up AS (
	INSERT INTO {{locks}} AS l (key, lock_id, acquired_at, expires_at, user_key)
	SELECT $1, $2, a.now, a.now + ` + ttlExpr("$3") + `, $4 FROM admitted AS a
	ON CONFLICT (key) DO UPDATE SET
		lock_id = EXCLUDED.lock_id, user_key = EXCLUDED.user_key,
		(acquired_at, expires_at) = (SELECT t.now, t.now + ` + ttlExpr("$3") + ` FROM (SELECT clock_timestamp() AS now) AS t)
	WHERE l.expires_at <= clock_timestamp()
	RETURNING l.acquired_at, l.expires_at
), next AS (
	INSERT INTO {{fences}} AS f (key, fence) SELECT $1, 1 FROM up
	ON CONFLICT (key) DO UPDATE SET fence = f.fence + 1
	RETURNING f.fence
)
SELECT next.fence, up.acquired_at, up.expires_at FROM next, up`,

		release: `WITH d AS (
	DELETE FROM {{locks}} WHERE lock_id = $1 AND expires_at > clock_timestamp() RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM d), EXISTS (SELECT 1 FROM {{locks}} WHERE lock_id = $1)` + from("\nFROM "),

		releaseKey: `WITH d AS (
	DELETE FROM {{locks}} WHERE key = $2 AND lock_id = $1 AND expires_at > clock_timestamp() RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM d), EXISTS (SELECT 1 FROM {{locks}} WHERE key = $2 AND lock_id = $1)` + from("\nFROM "),

		extend: `WITH u AS (
	UPDATE {{locks}} SET expires_at = clock_timestamp() + ` + ttlExpr("$2") + `
	WHERE lock_id = $1 AND expires_at > clock_timestamp()
	RETURNING expires_at
)
SELECT (SELECT expires_at FROM u), EXISTS (SELECT 1 FROM {{locks}} WHERE lock_id = $1)`,

		extendKey: `WITH u AS (
	UPDATE {{locks}} SET expires_at = clock_timestamp() + ` + ttlExpr("$2") + `
	WHERE key = $3 AND lock_id = $1 AND expires_at > clock_timestamp()
	RETURNING expires_at
)
SELECT (SELECT expires_at FROM u), EXISTS (SELECT 1 FROM {{locks}} WHERE key = $3 AND lock_id = $1)`,

		isLocked: `SELECT EXISTS (SELECT 1 FROM {{locks}} WHERE key = $1 AND expires_at > clock_timestamp())`,

		// The DELETE matches only a row expired for longer than the
		// grace; a live row is neither locked nor written.
		isLockedCleanup: `WITH d AS (
	DELETE FROM {{locks}} WHERE key = $1 AND expires_at < clock_timestamp() - ` + ttlExpr("$2") + `
)
SELECT EXISTS (SELECT 1 FROM {{locks}} WHERE key = $1 AND expires_at > clock_timestamp())` + from("\nFROM "),

		// A live lease's fence is its key's counter: the counter moves
		// only when a lease is granted, which needs the previous one to
		// have expired. Both rows are read in one snapshot, and an acquire
		// commits both at once.
		lookupKey: `SELECT l.key, l.user_key, l.lock_id, f.fence, l.acquired_at, l.expires_at
FROM {{locks}} AS l JOIN {{fences}} AS f ON f.key = l.key
WHERE l.key = $1 AND l.expires_at > clock_timestamp()`,

		lookupID: `SELECT l.key, l.user_key, l.lock_id, f.fence, l.acquired_at, l.expires_at
FROM {{locks}} AS l JOIN {{fences}} AS f ON f.key = l.key
WHERE l.lock_id = $1 AND l.expires_at > clock_timestamp()`,

		// One batch ($1 rows, for SweepBatches) of the oldest rows expired
		// for longer than the grace; rows locked by a concurrent operation
		// are skipped, not waited for.
		sweep: `DELETE FROM {{locks}} AS l` + from("\nUSING ") + `
WHERE l.key IN (
	SELECT key FROM {{locks}}
	WHERE expires_at < clock_timestamp() - ` + grace + `
	ORDER BY expires_at LIMIT $1
	FOR UPDATE SKIP LOCKED
) AND l.expires_at < clock_timestamp() - ` + grace,
	}
	for _, s := range []*string{&q.acquire, &q.release, &q.releaseKey, &q.extend, &q.extendKey,
		&q.isLocked, &q.isLockedCleanup, &q.lookupKey, &q.lookupID, &q.sweep} {
		*s = r.Replace(*s)
	}
	return q
}
