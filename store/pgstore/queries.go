package pgstore

import (
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idemkit/store"
)

// Record states in the state column: store.State's values, and 0 for a
// tombstone (a released claim or a deleted record, kept for its fence).
const (
	stateTombstone = 0
	stateClaimed   = int16(store.StateClaimed)
)

// queries holds the store's SQL, built once with its table name.
type queries struct {
	claim, extend, complete, release, releaseAgain, get, delete, dropSteps, put, sweep, list, findClaim string
	// recordStep appends a step to a claim (see [Store.RecordStep]).
	recordStep string
	// watched marks the key's live claim as waited for (see [Store.Watch]).
	watched string
}

// claimSQL is a claim's one statement ($1 the stored key, $2 the
// fingerprint, $3 the lease in microseconds). It answers one row (claimed,
// fingerprint, state, response, fence, created_at, expires_at, steps), or
// none when the row kept changing under it (the caller runs it again).
//
// A key live in the statement's snapshot (a replay, or busy) is answered
// by its first SELECT alone: LIMIT 1 stops the UNION ALL there, so the
// statement is read-only then (no write, no row lock, no transaction id)
// and the function is never called. Any other key goes to the table's
// claim function (schema.sql), which inserts a claim for an absent key,
// takes a dead row over, and answers a new claim's row with the
// fingerprint and response of the row it took over
// (store.Record.Replaced), or the winner's row, busy, when it lost a race.
// Only a take-over answers steps (those it carried over): a live row's
// are not the caller's.
const claimSQL = `SELECT false, r.fingerprint, r.state, r.response, r.fence, r.created_at, r.expires_at, NULL::bytea
FROM {{t}} AS r WHERE r.key = $1::text AND r.state <> 0 AND r.expires_at > clock_timestamp()
UNION ALL
SELECT * FROM {{claim}}($1::text, $2::bytea, $3::bigint, {{retention}}, {{step}})
LIMIT 1`

// buildQueries renders the store's SQL for table t and the largest clock
// step. async makes releases, sweeps and watch marks commit asynchronously
// (never inside a caller's transaction, whose commit it would change).
//
// Complete, Release and Delete notify only a claim marked as waited for
// (a notifying commit holds a server-wide lock until its WAL flush). They
// read the mark in their SET, which sees the row as it is before the
// write: READ COMMITTED evaluates it again on the newest version when the
// row changed after the snapshot, so a mark committed in between is not
// missed (the version the write skipped may notify too: one wake-up more,
// which waiters take as a cue to read again). No row lock of their own, no
// join: one row, one WAL record.
//
// Steps cost the statements of a record without them a test of the NULL
// steps column and nothing else: Complete and Delete set it NULL; Extend
// and Release, given steps, keep the keep_until a step set, and Release
// keeps the fingerprint with them for the next claim (see schema.sql).
func buildQueries(t tableName, step time.Duration, async bool) queries {
	asyncCol := ""
	if async {
		// A FROM item's column that turns synchronous_commit off for the
		// statement's own transaction, in the same round trip.
		asyncCol = ", set_config('synchronous_commit', 'off', true) AS async_commit"
	}
	q := queries{
		claim: claimSQL,

		// Only a live claim: one whose lease ran out is anyone's to take.
		extend: `UPDATE {{t}} AS r SET expires_at = n.t + {{ttl3}},
	keep_until = CASE WHEN r.steps IS NULL THEN {{claimKeep r.fence}} ELSE greatest(r.keep_until, {{claimKeep r.fence}}) END
FROM (SELECT clock_timestamp() AS t) AS n
WHERE r.key = $1::text AND r.fence = $2::bigint AND r.state = 1 AND r.expires_at > n.t
RETURNING r.expires_at`,

		// The holder's claim, or (a repeat of this very completion whose
		// answer was lost) the same outcome under the same fence.
		// Its time is the statement's start (statement_timestamp(), one
		// value for the whole statement without a join): it judges no
		// lease.
		complete: `UPDATE {{t}} AS r SET fingerprint = $5::bytea, state = {{notify then}} $3::smallint END, response = $4::bytea, steps = NULL,
	created_at = statement_timestamp(), expires_at = statement_timestamp() + {{ttl6}},
	keep_until = {{outcomeKeep ttl6 r.fence at statement_timestamp()}}
WHERE r.key = $1::text AND r.fence = $2::bigint
	AND (r.state = 1 OR (r.state = $3::smallint AND r.fingerprint = $5::bytea AND r.response = $4::bytea))`,

		release: `UPDATE {{t}} AS r SET state = {{notify then}} 0 END, fingerprint = {{fp unless steps}}, response = '', expires_at = n.t,
	keep_until = CASE WHEN r.steps IS NULL THEN {{tombKeep r.fence}} ELSE greatest(r.keep_until, {{tombKeep r.fence}}) END
FROM (SELECT clock_timestamp() AS t` + asyncCol + `) AS n
WHERE r.key = $1::text AND r.fence = $2::bigint AND r.state = 1 AND r.expires_at > n.t
RETURNING true`,

		// After a lost connection: this claim's tombstone says that the
		// try before released it.
		releaseAgain: `UPDATE {{t}} AS r SET state = {{notify then}} 0 END, fingerprint = {{fp unless steps}}, response = '', expires_at = least(r.expires_at, n.t),
	keep_until = greatest(r.keep_until, {{tombKeep r.fence}})
FROM (SELECT clock_timestamp() AS t` + asyncCol + `) AS n
WHERE r.key = $1::text AND r.fence = $2::bigint AND (r.state = 0 OR (r.state = 1 AND r.expires_at > n.t))
RETURNING true`,

		get: `SELECT fingerprint, state, response, fence, created_at, expires_at, steps
FROM {{t}} WHERE key = $1::text AND state <> 0 AND expires_at > clock_timestamp()`,

		// By the partial index on lock ids (see schema.go).
		findClaim: `SELECT key, fingerprint, state, response, fence, created_at, expires_at, steps
FROM {{t}} WHERE fingerprint = $1::bytea AND ` + lockIDRows + `
	AND state = 1 AND expires_at > clock_timestamp()
LIMIT 1`,

		// The live rows of two key ranges (see Store.List): $1 to $2 the
		// verbatim keys ($1 NULL: none; $2 NULL: unbounded), $3 to $4 the
		// hex ones; after $5, at most $6. One row of arrays: the store
		// needs nothing but QueryRow.
		list: `SELECT array_agg(key ORDER BY key), array_agg(fingerprint ORDER BY key), array_agg(state ORDER BY key),
	array_agg(response ORDER BY key), array_agg(fence ORDER BY key), array_agg(created_at ORDER BY key),
	array_agg(expires_at ORDER BY key), array_agg(steps ORDER BY key)
FROM (SELECT key, fingerprint, state, response, fence, created_at, expires_at, steps
	FROM {{t}}
	WHERE ((key >= $1::text AND ($2::text IS NULL OR key < $2::text) AND left(key, 2) <> '\x')
		OR (key >= $3::text AND key < $4::text))
		AND key > $5::text AND state <> 0 AND expires_at > clock_timestamp()
	ORDER BY key LIMIT $6) AS l`,

		delete: `UPDATE {{t}} AS r SET state = {{notify then}} 0 END, fingerprint = '', response = '', steps = NULL, expires_at = n.t,
	keep_until = {{tombKeep r.fence}}
FROM (SELECT clock_timestamp() AS t) AS n
WHERE r.key = $1::text AND r.state <> 0 AND r.expires_at > n.t
RETURNING true`,

		// Drops the steps a released or run-out claim left (after a
		// delete that found nothing live); a claim made since keeps its.
		dropSteps: `UPDATE {{t}} SET steps = NULL
WHERE key = $1::text AND steps IS NOT NULL AND (state = 0 OR expires_at <= clock_timestamp())
RETURNING true`,

		// Marks the key's claim as waited for (the byte \x01 in its
		// unused response column): true when it is marked, now or
		// before; false when the key holds no claim.
		watched: `WITH m AS (
	UPDATE {{t}} AS r SET response = '\x01'::bytea
	FROM (SELECT clock_timestamp() AS t` + asyncCol + `) AS n
	WHERE r.key = $1::text AND r.state = 1 AND r.response = ''
	RETURNING true
)
SELECT EXISTS (SELECT FROM m)
	OR EXISTS (SELECT FROM {{t}} AS r WHERE r.key = $1::text AND r.state = 1 AND r.response <> '')`,

		// The WHERE of DO UPDATE runs on the locked, newest version of the
		// row: a live record with a higher fence is kept; anything else is
		// replaced.
		put: `INSERT INTO {{t}} AS r (key, fingerprint, state, response, fence, created_at, expires_at, keep_until)
SELECT $1::text, $2::bytea, $3::smallint, $4::bytea, $5::bigint, n.t, n.t + {{ttl6}}, {{outcomeKeep ttl6 $5::bigint}}
FROM (SELECT clock_timestamp() AS t) AS n
ON CONFLICT (key) DO UPDATE SET
	fingerprint = EXCLUDED.fingerprint, state = EXCLUDED.state, response = EXCLUDED.response,
	fence = EXCLUDED.fence, created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at, steps = NULL,
	keep_until = greatest(EXCLUDED.keep_until, {{fenceTime r.fence}})
WHERE r.fence <= EXCLUDED.fence OR r.state = 0 OR r.expires_at <= EXCLUDED.created_at
RETURNING true`,

		// $3 steps recorded (the first byte of steps; none when NULL):
		// $4, the encoded step, goes after them, and their number becomes
		// $3 + 1. keep_until only grows, to $5 microseconds from now.
		recordStep: `UPDATE {{t}} AS r SET steps = set_byte(coalesce(r.steps, '\x00'::bytea), 0, $3::int + 1) || $4::bytea,
	keep_until = greatest(r.keep_until, n.t + {{ttl5}})
FROM (SELECT clock_timestamp() AS t) AS n
WHERE r.key = $1::text AND r.fence = $2::bigint AND r.state = 1 AND coalesce(get_byte(r.steps, 0), 0) = $3::int
RETURNING true`,

		// One batch ($1 rows) of the rows past their keep_until, oldest
		// first; rows locked by a concurrent operation are skipped.
		sweep: `DELETE FROM {{t}} AS r
USING (SELECT clock_timestamp() AS t` + asyncCol + `) AS n
WHERE r.key IN (
	SELECT key FROM {{t}}
	WHERE keep_until <= clock_timestamp()
	ORDER BY keep_until LIMIT $1
	FOR UPDATE SKIP LOCKED
) AND r.keep_until <= n.t`,
	}
	retention := fmt.Sprintf("interval '%d microseconds'", store.ClaimRetention.Microseconds())
	// The fence rule (see store.Store): past the fence read as Unix
	// milliseconds plus the largest clock step.
	fenceTime := func(f string) string {
		return fmt.Sprintf("(timestamptz 'epoch' + (%s + 1) * interval '1 millisecond' + interval '%d microseconds')", f, step.Microseconds())
	}
	ttl := func(param string) string { return "(" + param + "::bigint * interval '1 microsecond')" }
	r := strings.NewReplacer(
		"{{t}}", t.sanitize(),
		"{{claim}}", t.claimFunc(),
		"{{retention}}", fmt.Sprint(store.ClaimRetention.Microseconds()),
		"{{step}}", fmt.Sprint(step.Microseconds()),
		// The opening of a CASE whose one branch is always taken: it
		// notifies first when the row is a claim marked as waited for
		// (pg_notify returns void, which is not null).
		"{{notify then}}", "CASE WHEN r.state <> 1 OR r.response = '' OR pg_notify("+quoteLiteral(t.channel())+", r.key) IS NOT NULL THEN",
		"{{ttl3}}", ttl("$3"),
		"{{ttl5}}", ttl("$5"),
		"{{ttl6}}", ttl("$6"),
		// A release keeps the fingerprint of a claim with steps, whose
		// next claim of that fingerprint carries them.
		"{{fp unless steps}}", "CASE WHEN r.steps IS NULL THEN ''::bytea ELSE r.fingerprint END",
		// A claim: kept ClaimRetention past its lease, and past its fence.
		"{{claimKeep r.fence}}", "greatest(n.t + "+ttl("$3")+" + "+retention+", "+fenceTime("r.fence")+")",
		// An outcome: kept until it expires, and past its fence.
		"{{outcomeKeep ttl6 r.fence at statement_timestamp()}}", "greatest(statement_timestamp() + "+ttl("$6")+", "+fenceTime("r.fence")+")",
		"{{outcomeKeep ttl6 $5::bigint}}", "greatest(n.t + "+ttl("$6")+", "+fenceTime("$5::bigint")+")",
		// A tombstone: past its fence only.
		"{{tombKeep r.fence}}", "greatest(n.t, "+fenceTime("r.fence")+")",
		"{{fenceTime r.fence}}", fenceTime("r.fence"),
	)
	for _, s := range []*string{&q.claim, &q.extend, &q.complete, &q.release, &q.releaseAgain, &q.get, &q.delete, &q.dropSteps, &q.put, &q.sweep, &q.watched, &q.list, &q.findClaim, &q.recordStep} {
		*s = r.Replace(*s)
	}
	return q
}
