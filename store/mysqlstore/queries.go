package mysqlstore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// Every statement carries its values as literals (bytes in hex, numbers in
// decimal), so that it is one COM_QUERY, one round trip, whatever the DSN
// says (without interpolateParams=true, a statement with arguments is a
// prepare, an execute and a close) and whatever the session's sql_mode
// (hex needs no escaping).

// bytesLit returns b as a hex literal: a binary string.
func bytesLit(b []byte) string { return "X'" + hex.EncodeToString(b) + "'" }

// intLit returns n as a decimal literal.
func intLit(n int64) string { return strconv.FormatInt(n, 10) }

// nowSQL is the server's clock in Unix microseconds, UTC whatever the
// session's time zone (no conversion through it). Constant within a
// statement.
const nowSQL = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"

// queries holds the store's SQL templates, rendered once with its table
// name and clock step; the methods fill in the values.
type queries struct {
	claim, extend, complete, release, releaseAgain, get, delete, put, sweep, list, findClaim string
	recordStep, recordStepAgain                                                              string
	step                                                                                     int64 // the clock step in microseconds
}

// Templates: {{t}} the table, {{now}} the clock, {{fenceTime f}} the
// fence rule's time for fence f (past the fence read as Unix milliseconds,
// plus the largest clock step), {{retention}} store.ClaimRetention; %s the
// values, in order. A fenced statement reports that it matched through
// LAST_INSERT_ID(expr) (see Store.exec), evaluated only on a matching row.
// MySQL assigns SET columns left to right, each seeing those before it:
// no expression here reads a column the same SET assigned before it.
const (
	// Only a live claim: one whose lease ran out is anyone's to take. The
	// keep a step set stays.
	extendTmpl = `UPDATE {{t}} SET expires_at = LAST_INSERT_ID({{now}} + %s),
	keep_until = GREATEST(IF(step_count > 0, keep_until, 0), {{now}} + %s + {{retention}}, {{fenceTime fence}})
WHERE record_key = %s AND fence = %s AND state = 1 AND expires_at > {{now}}`

	// The holder's claim, or (a repeat of this very completion whose
	// answer was lost) the same outcome under the same fence, its response
	// compared by length and SHA-256, not sent twice. An outcome has no
	// steps.
	completeTmpl = `UPDATE {{t}} SET fingerprint = %s, lock_id = NULL, state = %s, response = %s, created_at = {{now}},
	expires_at = LAST_INSERT_ID({{now}} + %s), keep_until = GREATEST({{now}} + %s, {{fenceTime fence}}), steps = NULL, step_count = 0
WHERE record_key = %s AND fence = %s
	AND (state = 1 OR (state = %s AND fingerprint = %s AND LENGTH(response) = %s AND SHA2(response, 256) = %s))`

	// A claim with steps leaves them in its tombstone, with its
	// fingerprint and its keep, for the next claim of that fingerprint.
	releaseTmpl = `UPDATE {{t}} SET state = 0, fingerprint = IF(step_count > 0, fingerprint, ''), lock_id = NULL, response = '',
	expires_at = LAST_INSERT_ID({{now}}), keep_until = GREATEST(IF(step_count > 0, keep_until, 0), {{now}}, {{fenceTime fence}})
WHERE record_key = %s AND fence = %s AND state = 1 AND expires_at > {{now}}`

	// After a lost connection: this claim's tombstone says that the try
	// before released it.
	releaseAgainTmpl = `UPDATE {{t}} SET state = 0, fingerprint = IF(step_count > 0, fingerprint, ''), lock_id = NULL, response = '',
	keep_until = GREATEST(keep_until, {{now}}, {{fenceTime fence}}), expires_at = LAST_INSERT_ID(LEAST(expires_at, {{now}}))
WHERE record_key = %s AND fence = %s AND (state = 0 OR (state = 1 AND expires_at > {{now}}))`

	// The claim's step number %s (its step count), appended whole to its
	// steps, also once its lease ran out (nobody claimed since); the keep
	// raises keep_until, never lowers it.
	recordStepTmpl = `UPDATE {{t}} SET steps = CONCAT(COALESCE(steps, X''), %s), step_count = LAST_INSERT_ID(step_count + 1),
	keep_until = GREATEST(keep_until, {{now}} + %s)
WHERE record_key = %s AND fence = %s AND state = 1 AND step_count = %s`

	// After a lost connection: the claim's steps ending with this very
	// step at index %s say that the try before landed (a step's encoding
	// ends with its lengths, so a match at the end is the whole last step).
	recordStepAgainTmpl = `UPDATE {{t}} SET steps = IF(step_count = %s, CONCAT(COALESCE(steps, X''), %s), steps),
	step_count = LAST_INSERT_ID(%s), keep_until = GREATEST(keep_until, {{now}} + %s)
WHERE record_key = %s AND fence = %s AND state = 1
	AND (step_count = %s OR (step_count = %s AND RIGHT(steps, %s) = %s))`

	getTmpl = `SELECT fingerprint, state, response, fence, created_at, expires_at, steps
FROM {{t}} WHERE record_key = %s AND state <> 0 AND expires_at > {{now}}`

	// By the index on lock_id, which only a claim whose fingerprint is a
	// lock id fills.
	findClaimTmpl = `SELECT record_key, fingerprint, state, response, fence, created_at, expires_at, steps
FROM {{t}} WHERE lock_id = %s AND state = 1 AND expires_at > {{now}} LIMIT 1`

	// A live record, reported through LAST_INSERT_ID (1, or 0 when
	// there was none), or a dead claim or a tombstone that carries steps:
	// a deleted key's next claim starts afresh.
	deleteTmpl = `UPDATE {{t}} SET expires_at = IF(LAST_INSERT_ID(state <> 0 AND expires_at > {{now}}), {{now}}, expires_at),
	state = 0, fingerprint = '', lock_id = NULL, response = '', steps = NULL, step_count = 0,
	keep_until = GREATEST({{now}}, {{fenceTime fence}})
WHERE record_key = %s AND ((state <> 0 AND expires_at > {{now}}) OR step_count > 0)`

	// A live record with a higher fence is kept; anything else is
	// replaced. The condition reads the row as it was, in the first
	// assignment (which reports the decision: LAST_INSERT_ID 2 replaced,
	// 1 kept; an inserted row never runs the UPDATE clause) and after
	// (the next assigns fence, and once it holds n.f the condition still
	// holds), whether the server assigns left to right (MySQL, MariaDB's
	// default) or all at once (MariaDB's SIMULTANEOUS_ASSIGNMENT).
	putTmpl = `INSERT INTO {{t}} (record_key, fingerprint, lock_id, state, response, fence, created_at, expires_at, keep_until)
SELECT n.k, n.fp, NULL, n.st, n.resp, n.f, n.t, n.e, n.ku FROM (
	SELECT %s AS k, %s AS fp, %s AS st, %s AS resp, %s AS f, {{now}} AS t, {{now}} + %s AS e,
		GREATEST({{now}} + %s, {{fenceTime n}}) AS ku
) AS n
ON DUPLICATE KEY UPDATE
	keep_until = IF(LAST_INSERT_ID(IF({{c}}, 2, 1)) = 2, GREATEST(n.ku, {{fenceTime fence}}), keep_until),
	fence = IF({{c}}, n.f, fence),
	steps = IF({{c}}, NULL, steps),
	step_count = IF({{c}}, 0, step_count),
	fingerprint = IF({{c}}, n.fp, fingerprint),
	lock_id = IF({{c}}, NULL, lock_id),
	state = IF({{c}}, n.st, state),
	response = IF({{c}}, n.resp, response),
	created_at = IF({{c}}, n.t, created_at),
	expires_at = IF({{c}}, n.e, expires_at)`

	// One batch of the rows past their keep_until, oldest first.
	sweepTmpl = `DELETE FROM {{t}} WHERE keep_until <= {{now}} ORDER BY keep_until LIMIT %s`

	// The live rows whose key is in [lo, hi) (hi "" : unbounded) and after
	// the cursor, in key order (bytewise), at most n.
	listTmpl = `SELECT record_key, fingerprint, state, response, fence, created_at, expires_at, steps
FROM {{t}} WHERE record_key >= %s%s AND record_key > %s AND state <> 0 AND expires_at > {{now}}
ORDER BY record_key LIMIT %s`
)

// buildQueries renders the store's SQL for table t and the largest clock
// step.
func buildQueries(t tableName, step time.Duration) queries {
	us := step.Microseconds()
	fenceTime := func(f string) string {
		return fmt.Sprintf("((%s + 1) * 1000 + %d)", f, us)
	}
	r := strings.NewReplacer(
		"{{t}}", t.quoted(),
		"{{now}}", nowSQL,
		"{{retention}}", intLit(store.ClaimRetention.Microseconds()),
		"{{fenceTime fence}}", fenceTime("fence"),
		"{{fenceTime n}}", fenceTime("%s"),
		"{{c}}", "(fence <= n.f OR state = 0 OR expires_at <= n.t)",
	)
	q := queries{
		extend: extendTmpl, complete: completeTmpl, release: releaseTmpl, releaseAgain: releaseAgainTmpl,
		get: getTmpl, findClaim: findClaimTmpl, delete: deleteTmpl, put: putTmpl, sweep: sweepTmpl, list: listTmpl,
		recordStep: recordStepTmpl, recordStepAgain: recordStepAgainTmpl,
		claim: "CALL " + t.claimProc() + "(%s, %s, %s, %s, %s, %s)",
		step:  us,
	}
	for _, s := range []*string{&q.extend, &q.complete, &q.release, &q.releaseAgain, &q.get, &q.findClaim, &q.delete, &q.put, &q.sweep, &q.list,
		&q.recordStep, &q.recordStepAgain} {
		*s = r.Replace(*s)
	}
	return q
}

func (q *queries) claimCall(key, fp string, ttl time.Duration) string {
	return fmt.Sprintf(q.claim, bytesLit([]byte(key)), bytesLit([]byte(fp)), lockID(fp),
		intLit(ttl.Microseconds()), intLit(store.ClaimRetention.Microseconds()), intLit(q.step))
}

func (q *queries) extendSQL(key string, fence idemkit.Fence, ttl time.Duration) string {
	us := intLit(ttl.Microseconds())
	return fmt.Sprintf(q.extend, us, us, bytesLit([]byte(key)), intLit(int64(fence)))
}

func (q *queries) completeSQL(rec store.Record, ttl time.Duration) string {
	us := intLit(ttl.Microseconds())
	sum := sha256.Sum256(rec.Response)
	st, fp := intLit(int64(rec.State)), bytesLit([]byte(rec.Fingerprint))
	return fmt.Sprintf(q.complete, fp, st, bytesLit(rec.Response), us, us, bytesLit([]byte(rec.Key)), intLit(int64(rec.Fence)),
		st, fp, intLit(int64(len(rec.Response))), bytesLit(sum[:]))
}

func (q *queries) releaseSQL(key string, fence idemkit.Fence, again bool) string {
	tmpl := q.release
	if again {
		tmpl = q.releaseAgain
	}
	return fmt.Sprintf(tmpl, bytesLit([]byte(key)), intLit(int64(fence)))
}

// recordStepSQL appends enc, a step's encoding, to the claim (key, fence)
// as its step number index, kept at least keep from now; again, after a
// lost connection, it also reports the step landed when found there.
func (q *queries) recordStepSQL(key string, fence idemkit.Fence, index int, enc []byte, keep time.Duration, again bool) string {
	k, f, e, us := bytesLit([]byte(key)), intLit(int64(fence)), bytesLit(enc), intLit(keep.Microseconds())
	i, next := intLit(int64(index)), intLit(int64(index)+1)
	if again {
		return fmt.Sprintf(q.recordStepAgain, i, e, next, us, k, f, i, next, intLit(int64(len(enc))), e)
	}
	return fmt.Sprintf(q.recordStep, e, us, k, f, i)
}

func (q *queries) getSQL(key string) string { return fmt.Sprintf(q.get, bytesLit([]byte(key))) }

func (q *queries) findClaimSQL(fp string) string {
	return fmt.Sprintf(q.findClaim, bytesLit([]byte(fp)))
}

func (q *queries) deleteSQL(key string) string { return fmt.Sprintf(q.delete, bytesLit([]byte(key))) }

func (q *queries) putSQL(rec store.Record, ttl time.Duration) string {
	us, f := intLit(ttl.Microseconds()), intLit(int64(rec.Fence))
	return fmt.Sprintf(q.put, bytesLit([]byte(rec.Key)), bytesLit([]byte(rec.Fingerprint)), intLit(int64(rec.State)),
		bytesLit(rec.Response), f, us, us, f)
}

func (q *queries) sweepSQL(batch int) string { return fmt.Sprintf(q.sweep, intLit(int64(batch))) }

// listSQL selects the live rows whose key is at least lo and below hi
// (nil: unbounded), after the key after, at most n.
func (q *queries) listSQL(lo, hi, after []byte, n int) string {
	upper := ""
	if hi != nil {
		upper = " AND record_key < " + bytesLit(hi)
	}
	return fmt.Sprintf(q.list, bytesLit(lo), upper, bytesLit(after), intLit(int64(n)))
}
