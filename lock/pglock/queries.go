package pglock

import (
	"strconv"
	"strings"

	"github.com/idemkit/idemkit/lock"
)

// queries holds the locker's SQL, built once with its table name.
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
	watch           string
}

// asyncCommit is a FROM item that turns synchronous_commit off for the
// statement's own transaction (set_config with is_local), so its commit does
// not wait for the WAL flush. It is left out inside a caller's transaction,
// whose commit it would otherwise weaken.
const asyncCommit = `(SELECT set_config('synchronous_commit', 'off', true)) AS async_commit`

// ttlExpr turns a parameter (or a literal) holding microseconds into an
// interval.
func ttlExpr(param string) string { return "(" + param + "::bigint * interval '1 microsecond')" }

// msOf is the Unix time in whole milliseconds of a timestamptz expression:
// the clock a fence is compared with (provider.NextFence, provider.KeepUntil).
func msOf(t string) string { return "floor(extract(epoch FROM " + t + ") * 1000)::bigint" }

// msTime is the instant of a Unix time in milliseconds.
func msTime(ms string) string {
	return "(timestamptz 'epoch' + (" + ms + ") * interval '1 millisecond')"
}

// keyLock is the transaction-scoped advisory lock of a storage key,
// tried without waiting: an acquire holds it from before it reads the
// clock until it commits, and so does every statement that deletes the
// key's row. Without it, an acquire could read the clock, a release or
// sweep could then delete the row (its fence passed by the clock at that
// later instant) and the acquire insert a fresh row whose fence, the clock
// it read earlier, equals the deleted one. With it, a deletion either
// commits before the acquire reads the clock (the clock then exceeds the
// deleted fence) or waits for the acquire, which then finds the row and
// builds on its fence. The lock is named by the 64-bit hash of the storage
// key, seeded with the schema's advisory lock number: another application's
// advisory lock on the same number, or a hash collision between two keys,
// can only make an acquire answer "locked" (or a deletion leave the row for
// later) for the instant the other lock is held.
func keyLock(sk string) string {
	return "pg_try_advisory_xact_lock(hashtextextended(" + sk + ", " + strconv.FormatInt(schemaLockID, 10) + "))"
}

// removable is the condition under which the row aliased r may be deleted
// at the instant now, given its key's lock (see keyLock): its expiry (a
// lease's end, a tombstone's fence) passed more than lock.CleanupGrace ago,
// so that a release soon after the expiry still finds the lease and
// answers "expired", and the clock has passed its fence read as Unix
// milliseconds, so that the key's next fence (the greater of fence + 1 and
// the clock) is greater still.
func removable(r, now string) string {
	grace := ttlExpr(strconv.FormatInt(lock.CleanupGrace.Microseconds(), 10)) // a constant
	return r + "expires_at < " + now + " - " + grace + " AND " + r + "fence < " + msOf(now)
}

// sqlString quotes s as an SQL string literal.
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func buildQueries(n tableName, async bool) queries {
	from := func(prefix string) string {
		if !async {
			return ""
		}
		return prefix + asyncCommit
	}
	// release finds the live lease with lock id $1 (and key $2 when
	// byKey) by one clock reading, c.now, and decides in r whether to
	// delete its row: only if that reading has passed the fence and the
	// key's lock (see keyLock) is free. Otherwise it leaves a tombstone: no
	// lock id, the fence, expiring once the clock passes the fence. d and
	// t follow r's one decision, so exactly one of them can match; both
	// recheck the lease under its row lock. n sends the notification of the
	// ended lease on the table's channel, with the storage key as payload,
	// as part of the statement's transaction: it is delivered when that
	// commits, and never if it does not. It then tells an expired lease
	// from a missing one, and returns the released row's key.
	release := func(byKey string) string {
		return `WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now),
r AS MATERIALIZED (
	SELECT l.key, CASE WHEN l.fence < ` + msOf("c.now") + ` THEN ` + keyLock("l.key") + ` ELSE false END AS gone
	FROM {{locks}} AS l, c
	WHERE l.lock_id = $1` + byKey + ` AND l.expires_at > c.now
), d AS (
	DELETE FROM {{locks}} AS l USING r, c
	WHERE r.gone AND l.key = r.key AND l.lock_id = $1 AND l.expires_at > c.now
	RETURNING l.key
), t AS (
	UPDATE {{locks}} AS l SET lock_id = NULL, user_key = NULL, expires_at = ` + msTime("l.fence + 1") + `
	FROM r, c
	WHERE NOT r.gone AND l.key = r.key AND l.lock_id = $1 AND l.expires_at > c.now
	RETURNING l.key
), e AS (
	SELECT key FROM d UNION ALL SELECT key FROM t
), n AS (
	SELECT pg_notify(` + sqlString(n.channel()) + `, e.key) FROM e
)
SELECT (SELECT count(*) FROM n) > 0,
	EXISTS (SELECT 1 FROM {{locks}} AS l WHERE l.lock_id = $1` + byKey + `),
	(SELECT key FROM e)` + from("\nFROM ")
	}
	extend := func(byKey, ttl string) string {
		return `WITH u AS (
	UPDATE {{locks}} AS l SET expires_at = clock_timestamp() + ` + ttlExpr(ttl) + `
	WHERE l.lock_id = $1` + byKey + ` AND l.expires_at > clock_timestamp()
	RETURNING l.expires_at
)
SELECT (SELECT expires_at FROM u), EXISTS (SELECT 1 FROM {{locks}} AS l WHERE l.lock_id = $1` + byKey + `)`
	}
	const lookup = `SELECT l.key, l.user_key, l.lock_id, l.fence, l.acquired_at, l.expires_at
FROM {{locks}} AS l
WHERE `
	q := queries{
		// One statement, one implicit transaction. admitted yields a row
		// only when no live lease holds the key by the statement's
		// snapshot (a plain read: a held key costs no write, no row lock,
		// no transaction id and no WAL) and then (CASE keeps the order)
		// the key's lock was free (see keyLock: one acquirer of a key at a
		// time, the others answer "locked" at once, so releasing a hot key
		// starts no thundering herd); its clock_timestamp() is read after
		// that lock. up inserts the row, or takes the existing one only if
		// it is a tombstone or an expired lease once its row lock is held: the WHERE of DO UPDATE runs on the locked, latest
		// row version (with a fresh clock_timestamp()), so a concurrent
		// extend either commits first and keeps its lease, or finds the
		// new lock id and fails. The fence is the greater of the row's
		// fence + 1 and the clock in Unix milliseconds (provider.NextFence);
		// past idemkit.FenceMax the column's CHECK constraint fails the whole
		// statement, so nothing is written.
		acquire: `WITH admitted AS MATERIALIZED (
	SELECT clock_timestamp() AS now
	WHERE CASE WHEN NOT EXISTS (
		SELECT 1 FROM {{locks}} WHERE key = $1 AND lock_id IS NOT NULL AND expires_at > clock_timestamp()
	) THEN ` + keyLock("$1") + ` ELSE false END
), up AS (
	INSERT INTO {{locks}} AS l (key, lock_id, fence, acquired_at, expires_at, user_key)
	SELECT $1, $2, greatest(1, ` + msOf("a.now") + `), a.now, a.now + ` + ttlExpr("$3") + `, $4 FROM admitted AS a
	ON CONFLICT (key) DO UPDATE SET
		lock_id = EXCLUDED.lock_id, user_key = EXCLUDED.user_key,
		(fence, acquired_at, expires_at) = (
			SELECT greatest(l.fence + 1, ` + msOf("t.now") + `), t.now, t.now + ` + ttlExpr("$3") + `
			FROM (SELECT clock_timestamp() AS now) AS t
		)
	WHERE l.lock_id IS NULL OR l.expires_at <= clock_timestamp()
	RETURNING l.fence, l.acquired_at, l.expires_at
)
SELECT fence, acquired_at, expires_at FROM up`,

		release:    release(""),
		releaseKey: release(" AND l.key = $2"),

		extend:    extend("", "$2"),
		extendKey: extend(" AND l.key = $3", "$2"),

		isLocked: `SELECT EXISTS (
	SELECT 1 FROM {{locks}} WHERE key = $1 AND lock_id IS NOT NULL AND expires_at > clock_timestamp()
)`,

		// The DELETE matches only a removable row whose key's lock is
		// free, tried only once the row is removable (CASE keeps the
		// order); a live lease is neither locked nor written.
		isLockedCleanup: `WITH d AS (
	DELETE FROM {{locks}} AS l
	WHERE l.key = $1 AND CASE WHEN ` + removable("l.", "clock_timestamp()") + ` THEN ` + keyLock("l.key") + ` ELSE false END
)
SELECT EXISTS (
	SELECT 1 FROM {{locks}} WHERE key = $1 AND lock_id IS NOT NULL AND expires_at > clock_timestamp()
)` + from("\nFROM "),

		lookupKey: lookup + `l.key = $1 AND l.lock_id IS NOT NULL AND l.expires_at > clock_timestamp()`,
		lookupID:  lookup + `l.lock_id = $1 AND l.expires_at > clock_timestamp()`,

		// The live lease's remaining time by the server clock, in whole
		// microseconds rounded up; no row when the key is free.
		watch: `SELECT ceil(extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000)::bigint
FROM {{locks}} AS l
WHERE l.key = $1 AND l.lock_id IS NOT NULL AND l.expires_at > clock_timestamp()`,

		// One batch (at most $1 rows) of the oldest removable rows; rows
		// locked by a concurrent operation, or whose key's lock is held,
		// are skipped, not waited for. The key locks are tried on the
		// batch's rows only (no qualifier is pushed below a LIMIT) and
		// released at its commit.
		sweep: `DELETE FROM {{locks}} AS l` + from("\nUSING ") + `
WHERE l.key IN (
	SELECT b.key FROM (
		SELECT s.key FROM {{locks}} AS s
		WHERE ` + removable("s.", "clock_timestamp()") + `
		ORDER BY s.expires_at LIMIT $1
		FOR UPDATE SKIP LOCKED
	) AS b
	WHERE ` + keyLock("b.key") + `
) AND ` + removable("l.", "clock_timestamp()"),
	}
	r := strings.NewReplacer("{{locks}}", n.sanitize())
	for _, s := range []*string{&q.acquire, &q.release, &q.releaseKey, &q.extend, &q.extendKey,
		&q.isLocked, &q.isLockedCleanup, &q.lookupKey, &q.lookupID, &q.sweep, &q.watch} {
		*s = r.Replace(*s)
	}
	return q
}
