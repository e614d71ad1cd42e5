-- idemkit store/pgstore schema, with the default table name
-- (idemkit_records). pgstore.SetupSchema runs exactly this DDL (for the name
-- it is given) in one transaction that first takes
-- pg_advisory_xact_lock(7594306392281412641). Every statement is
-- idempotent, so migration tools may apply this file as it is.

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
    -- past it), and past the fence read as Unix milliseconds plus the
    -- largest clock step (pgstore.WithMaxClockStep).
    keep_until  timestamptz NOT NULL
);
-- Sweep: the rows past keep_until, oldest first, without a scan of the table.
CREATE INDEX IF NOT EXISTS "idemkit_records_keep_until_idx" ON "idemkit_records" (keep_until);
-- FindClaim: the rows whose fingerprint is a lock id (22 base64url
-- characters), by fingerprint. A guard's fingerprint never is one, so its
-- writes add no entry here.
CREATE INDEX IF NOT EXISTS "idemkit_records_lock_id_idx" ON "idemkit_records" (fingerprint)
    WHERE octet_length(fingerprint) = 22 AND encode(fingerprint, 'escape') ~ '^[A-Za-z0-9_-]{22}$';
