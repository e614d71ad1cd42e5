-- idemkit store/pgstore schema, with the default table name
-- (idemkit_records). pgstore.SetupSchema runs exactly this DDL (for the name
-- it is given) in one transaction that first takes
-- pg_advisory_xact_lock(7594306392281412641). Every statement is
-- idempotent, so migration tools may apply this file as it is; the claim
-- function is replaced each time (CREATE OR REPLACE), so the role that
-- applies it must own the function, as the one that created it does. The
-- function names the table unqualified, as this file does: it finds it on
-- the caller's search_path, like the store's statements on the default
-- name (SetupSchema with WithTable("schema.table") qualifies both).

-- Records: one row per record key, holding a claim while its request runs,
-- then the request's outcome. Time is the server's clock_timestamp(). A row
-- past its keep_until is deleted by Sweep (or taken over in place by a new
-- claim before that).
CREATE TABLE IF NOT EXISTS "idemkit_records" (
    -- The record key itself when it is printable ASCII (0x20..0x7E) not
    -- starting with \x; otherwise \x followed by the hex of its bytes.
    key         text COLLATE "C" PRIMARY KEY,
    -- The request's fingerprint, as the caller gave it.
    fingerprint bytea       NOT NULL,
    -- 1 claimed, 2 completed, 3 executed but not replayable; 0 a tombstone
    -- (a released claim or a deleted record, kept only for its fence).
    state       smallint    NOT NULL,
    -- The encoded response when completed. Empty otherwise, except that a
    -- claim a duplicate waits for holds \x01 (its end then notifies).
    response    bytea       NOT NULL,
    -- The claim's fence: above every fence the key carried before. The
    -- check refuses, atomically, the claim that would pass idemkit.FenceMax.
    fence       bigint      NOT NULL CHECK (fence <= 900000000000000),
    -- When the claim was made or the outcome written.
    created_at  timestamptz NOT NULL,
    -- A claim: when its lease runs out; an outcome: when it is forgotten.
    expires_at  timestamptz NOT NULL,
    -- When Sweep may delete the row: past expires_at (a claim: one minute
    -- past it), past the fence read as Unix milliseconds plus the
    -- largest clock step (pgstore.WithMaxClockStep), and past the keep
    -- its last step asked for.
    keep_until  timestamptz NOT NULL,
    -- A claim's recorded steps (store.Step), NULL when it has none: one
    -- byte, their number, then each step as the uvarint length of its
    -- name, the name, the uvarint length of its result, the result. A
    -- released claim's tombstone keeps them, with its fingerprint, for the
    -- next claim of that fingerprint.
    steps       bytea
);
-- A table made before steps: add the column (nullable, no default: no
-- rewrite), looked up first, since ALTER TABLE locks the table even when
-- it has nothing to do. A claim function from before steps answers no
-- steps, and CREATE OR REPLACE cannot change what a function answers:
-- drop it, to be created again below, in this transaction.
DO $migrate$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass('"idemkit_records"')
            AND attname = 'steps' AND NOT attisdropped) THEN
        ALTER TABLE "idemkit_records" ADD COLUMN steps bytea;
    END IF;
    IF EXISTS (SELECT FROM pg_proc WHERE oid = to_regprocedure('"idemkit_records_claim"(text, bytea, bigint, bigint, bigint)')
            AND NOT 'steps' = ANY (proargnames)) THEN
        DROP FUNCTION "idemkit_records_claim"(text, bytea, bigint, bigint, bigint);
    END IF;
END
$migrate$;
-- Sweep: the rows past keep_until, oldest first, without a scan of the table.
CREATE INDEX IF NOT EXISTS "idemkit_records_keep_until_idx" ON "idemkit_records" (keep_until);
-- FindClaim: the rows whose fingerprint is a lock id (22 base64url
-- characters), by fingerprint. A guard's fingerprint never is one, so its
-- writes add no entry here.
CREATE INDEX IF NOT EXISTS "idemkit_records_lock_id_idx" ON "idemkit_records" (fingerprint)
    WHERE octet_length(fingerprint) = 22 AND encode(fingerprint, 'escape') ~ '^[A-Za-z0-9_-]{22}$';
-- Claim: pgstore's claim of key k that its statement did not find live
-- (SELECT * FROM "idemkit_records_claim"(key, fingerprint, lease,
-- retention, clock step), durations in microseconds. A key with no row
-- gets a claim inserted (tried first: most keys claimed are new); a dead
-- row (a tombstone, a run-out claim, an expired outcome) is taken over in place,
-- its fence above the last one, answering the replaced row's fingerprint
-- and response; a live one (a racing claim won) is answered as it is. A
-- take-over of a claim that ended without an outcome (run out or
-- released) of the same fingerprint, within its keep_until, carries its
-- steps and keep_until over. It answers one row (claimed, fingerprint,
-- state, response, fence, created_at, expires_at, steps), or none when
-- the row kept changing under it
-- (the caller calls again). Each statement in it sees what committed
-- before it, so a claim that lost a race reads the winner's row on its
-- next turn. The fence is the clock in milliseconds, above the row's
-- fence; a row is kept past its lease plus the retention, and past its
-- fence read as a time plus the step.
CREATE OR REPLACE FUNCTION "idemkit_records_claim"(k text, fp bytea, lease bigint, retain bigint, step bigint)
RETURNS TABLE (claimed boolean, fingerprint bytea, state smallint, response bytea,
    fence bigint, created_at timestamptz, expires_at timestamptz, steps bytea)
LANGUAGE plpgsql VOLATILE AS $claim$
#variable_conflict use_column
DECLARE
    t timestamptz;
    ms bigint;
    waited boolean;
    seen boolean := false; -- a row was read: take it over rather than insert
BEGIN
    FOR try IN 1..3 LOOP
        t := clock_timestamp();
        ms := greatest(floor(extract(epoch FROM t) * 1000)::bigint, 1);
        IF NOT seen THEN
            -- DO NOTHING waits for a racing inserter, then inserts nothing.
            INSERT INTO "idemkit_records" AS r (key, fingerprint, state, response, fence, created_at, expires_at, keep_until)
            VALUES (k, fp, 1, '', ms, t, t + lease * interval '1 microsecond',
                greatest(t + (lease + retain) * interval '1 microsecond',
                    timestamptz 'epoch' + (ms + 1) * interval '1 millisecond' + step * interval '1 microsecond'))
            ON CONFLICT (key) DO NOTHING
            RETURNING r.fingerprint, r.state, r.response, r.fence, r.created_at, r.expires_at
            INTO fingerprint, state, response, fence, created_at, expires_at;
            IF FOUND THEN
                claimed := true;
                RETURN NEXT;
                RETURN;
            END IF;
        END IF;
        SELECT r.fingerprint, r.state, r.response, r.fence, r.created_at, r.expires_at
            INTO fingerprint, state, response, fence, created_at, expires_at
            FROM "idemkit_records" AS r WHERE r.key = k;
        IF FOUND AND state <> 0 AND expires_at > t THEN
            claimed := false; -- busy (or, after a race, the winner's outcome)
            RETURN NEXT;
            RETURN;
        ELSIF FOUND THEN
            -- Take the dead row over. READ COMMITTED checks the WHERE again
            -- on the newest version, so of racing take-overs one wins. A
            -- claim marked as waited for (response \x01) notifies, so that
            -- its waiters watch the new claim. Steps (only a claim or a
            -- release's tombstone has them) go to a claim of the same
            -- fingerprint, with their keep (the SET reads the old row).
            -- Only this RETURNING sets the output steps (NULL from the
            -- start, and again when it finds no row), so no other answer
            -- carries any.
            waited := state = 1 AND response <> '';
            UPDATE "idemkit_records" AS r SET fingerprint = fp, state = 1, response = '',
                fence = greatest(r.fence + 1, ms), created_at = t, expires_at = t + lease * interval '1 microsecond',
                keep_until = greatest(t + (lease + retain) * interval '1 microsecond',
                    timestamptz 'epoch' + (greatest(r.fence + 1, ms) + 1) * interval '1 millisecond' + step * interval '1 microsecond',
                    CASE WHEN r.steps IS NOT NULL AND r.fingerprint = fp AND r.keep_until > t THEN r.keep_until END),
                steps = CASE WHEN r.fingerprint = fp AND r.keep_until > t THEN r.steps END
            WHERE r.key = k AND (r.state = 0 OR r.expires_at <= t)
            RETURNING r.state, r.fence, r.created_at, r.expires_at, r.steps INTO state, fence, created_at, expires_at, steps;
            IF FOUND THEN
                IF waited THEN
                    PERFORM pg_notify('idemkit:idemkit_records', k);
                END IF;
                IF waited AND response = '\x01'::bytea THEN
                    response := ''; -- the mark, no response
                END IF;
                claimed := true; -- with the replaced row's fingerprint and response
                RETURN NEXT;
                RETURN;
            END IF;
            seen := true; -- a racing claim took it over: read it
        ELSIF seen THEN
            seen := false; -- the row is gone: insert
        ELSE
            -- A row the insert met but the snapshot lacks (above READ
            -- COMMITTED): DO UPDATE reads it past the snapshot and answers
            -- it when live (busy). Should it have vanished, this inserts a
            -- claim already run out, never a live one, which the next turn
            -- takes over.
            INSERT INTO "idemkit_records" AS r (key, fingerprint, state, response, fence, created_at, expires_at, keep_until)
            VALUES (k, fp, 1, '', ms, t, t, greatest(t + retain * interval '1 microsecond',
                timestamptz 'epoch' + (ms + 1) * interval '1 millisecond' + step * interval '1 microsecond'))
            ON CONFLICT (key) DO UPDATE SET state = r.state
            WHERE r.state <> 0 AND r.expires_at > EXCLUDED.created_at
            RETURNING r.fingerprint, r.state, r.response, r.fence, r.created_at, r.expires_at
            INTO fingerprint, state, response, fence, created_at, expires_at;
            IF FOUND AND state <> 0 AND expires_at > t THEN
                claimed := false;
                RETURN NEXT;
                RETURN;
            END IF;
            seen := true;
        END IF;
    END LOOP;
END
$claim$;
