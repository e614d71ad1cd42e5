-- idemkit store/pgstore schema, with the default table name
-- (idemkit_records). pgstore.SetupSchema runs exactly this DDL (for the name
-- it is given) inside a transaction holding pg_advisory_xact_lock(
-- 7594306392281412641), the constant pgstore.SchemaLockID. Every statement
-- is idempotent, so migration tools may apply this file as it is.

-- Records: the outcome of each execution, one row per record key. A row
-- whose expires_at has passed (by the server clock) is invisible to Get, is
-- replaced by any Put, and is deleted by Sweep.
CREATE TABLE IF NOT EXISTS "idemkit_records" (
    -- lock.StorageKey of the record key: "k:" + the key when it is valid
    -- UTF-8 without NUL and short, else "h:" + its SHA-256.
    key         text        PRIMARY KEY,
    -- The request's fingerprint, as the caller gave it.
    fingerprint bytea       NOT NULL,
    -- store.State: 1 completed, 2 executed but not replayable.
    state       smallint    NOT NULL,
    -- The encoded response (empty when not replayable).
    response    bytea       NOT NULL,
    -- The fence of the lease that wrote the record.
    fence       bigint      NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
-- Sweep: the expired rows, oldest first, without a scan of the table.
CREATE INDEX IF NOT EXISTS "idemkit_records_expires_at_idx" ON "idemkit_records" (expires_at);
