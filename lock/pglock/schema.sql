-- idemkit lock/pglock schema, with the default table name (idemkit_locks).
-- pglock.SetupSchema runs exactly this DDL (for the name it is given) inside
-- a transaction holding pg_advisory_xact_lock(7594306392281412641). Every
-- statement is idempotent, so migration tools may apply this file as it is.
-- Upgrading from a version with the fence-counter table
-- idemkit_lock_fences: see the package documentation.

-- Lock records: one row per key that is locked, was locked and has not
-- been removed yet, or keeps a released lease's fence (a tombstone). A
-- lease is live while clock_timestamp() < expires_at by the server clock;
-- acquire replaces an expired lease or a tombstone, release and extend
-- refuse an expired lease. A row is deleted (by Sweep, a release or
-- IsLocked's optional cleanup) only once the clock has passed its fence read
-- as Unix milliseconds, so the next fence of its key, the greater of the
-- previous fence + 1 and the clock in Unix milliseconds, is always greater.
CREATE TABLE IF NOT EXISTS "idemkit_locks" (
    -- provider.StorageKey of the normalised key: "k:" + the key when it is
    -- valid UTF-8 without NUL and short, else "h:" + its SHA-256.
    key         text        PRIMARY KEY,
    -- The lease's lock id (22 base64url characters); NULL in a tombstone.
    lock_id     text,
    -- The lease's fence, or a tombstone's: the last fence issued for the
    -- key. The check refuses, atomically, the acquire that would pass
    -- idemkit.FenceMax.
    fence       bigint      NOT NULL CONSTRAINT "idemkit_locks_fence_max" CHECK (fence <= 900000000000000),
    acquired_at timestamptz NOT NULL,
    -- The row's expiry: the lease's end, or for a tombstone the instant the
    -- clock passes its fence. Sweep deletes the rows past it.
    expires_at  timestamptz NOT NULL,
    -- The normalised key when key holds its hash, else NULL.
    user_key    bytea
);
-- Release, extend and lookup by lock id.
CREATE UNIQUE INDEX IF NOT EXISTS "idemkit_locks_lock_id_key" ON "idemkit_locks" (lock_id);
-- Sweep: the expired rows, oldest first, without a scan of the table.
CREATE INDEX IF NOT EXISTS "idemkit_locks_expires_at_idx" ON "idemkit_locks" (expires_at);
