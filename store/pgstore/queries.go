package pgstore

import (
	"strings"

	"github.com/idemkit/idemkit/lock/pglock"
)

// queries holds the store's SQL, built once with its table name.
type queries struct {
	get, put, delete, sweep string
}

// asyncCommit is a FROM item that turns synchronous_commit off for the
// statement's own transaction; left out inside a caller's transaction.
const asyncCommit = `(SELECT set_config('synchronous_commit', 'off', true)) AS async_commit`

// ttlExpr turns a parameter holding microseconds into an interval.
func ttlExpr(param string) string { return "(" + param + "::bigint * interval '1 microsecond')" }

func buildQueries(t pglock.TableName, async bool) queries {
	from := func(prefix string) string {
		if !async {
			return ""
		}
		return prefix + asyncCommit
	}
	q := queries{
		get: `SELECT fingerprint, state, response, fence, created_at, expires_at
FROM {{records}} WHERE key = $1 AND expires_at > clock_timestamp()`,

		// The WHERE of DO UPDATE runs on the locked, latest version of the
		// row: a live record with a higher fence is kept; anything else is
		// replaced.
		put: `INSERT INTO {{records}} AS r (key, fingerprint, state, response, fence, created_at, expires_at)
SELECT $1, $2, $3, $4, $5, c.now, c.now + ` + ttlExpr("$6") + `
FROM (SELECT clock_timestamp() AS now) AS c
ON CONFLICT (key) DO UPDATE SET
	fingerprint = EXCLUDED.fingerprint, state = EXCLUDED.state, response = EXCLUDED.response,
	fence = EXCLUDED.fence, created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
WHERE r.fence <= EXCLUDED.fence OR r.expires_at <= clock_timestamp()
RETURNING true`,

		delete: `WITH d AS (
	DELETE FROM {{records}} WHERE key = $1 RETURNING expires_at > clock_timestamp() AS live
)
SELECT coalesce(bool_or(live), false) FROM d`,

		// One batch ($1 rows, for pglock.SweepBatches) of the oldest
		// expired rows; rows locked by a concurrent Put are skipped.
		sweep: `DELETE FROM {{records}} AS r` + from("\nUSING ") + `
WHERE r.key IN (
	SELECT key FROM {{records}}
	WHERE expires_at <= clock_timestamp()
	ORDER BY expires_at LIMIT $1
	FOR UPDATE SKIP LOCKED
) AND r.expires_at <= clock_timestamp()`,
	}
	r := strings.NewReplacer("{{records}}", t.Sanitize())
	for _, s := range []*string{&q.get, &q.put, &q.delete, &q.sweep} {
		*s = r.Replace(*s)
	}
	return q
}
