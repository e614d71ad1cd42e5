-- idemkit lock/pglock schema, with the default table names (idemkit_locks,
-- idemkit_lock_fences). pglock.SetupSchema runs exactly this DDL (for the
-- names it is given) inside a transaction holding pg_advisory_xact_lock(
-- 7594306392281412641), the constant pglock.SchemaLockID. Every statement is
-- idempotent, so migration tools may apply this file as it is.

-- Lock records: one row per key that is locked or was locked and not yet
-- deleted. A row whose expires_at has passed (by the server clock) is
-- expired: acquire replaces it, release and extend refuse it, and Sweep (or
-- IsLocked's optional cleanup) deletes it once it has been expired for
-- longer than lock.CleanupGrace.
CREATE TABLE IF NOT EXISTS "idemkit_locks" (
    -- lock.StorageKey of the normalised key: "k:" + the key when it is
    -- valid UTF-8 without NUL and short, else "h:" + its SHA-256.
    key         text        PRIMARY KEY,
    -- The lease's lock id (22 base64url characters). The lease's fence is
    -- the key's fence counter: it moves only when a lease is granted.
    lock_id     text        NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    -- The normalised key when key holds its hash, else NULL.
    user_key    bytea
);
-- Release, extend and lookup by lock id.
CREATE UNIQUE INDEX IF NOT EXISTS "idemkit_locks_lock_id_key" ON "idemkit_locks" (lock_id);
-- Sweep: the expired rows, oldest first, without a scan of the table.
CREATE INDEX IF NOT EXISTS "idemkit_locks_expires_at_idx" ON "idemkit_locks" (expires_at);

-- Fence counters: one row per key ever locked, never deleted (not by
-- release, expiry, cleanup or Sweep), so fences only grow.
CREATE TABLE IF NOT EXISTS "idemkit_lock_fences" (
    -- The same storage key as the lock table's.
    key   text   PRIMARY KEY,
    -- The last fence issued for the key. The check refuses, atomically,
    -- the acquire that would pass lock.FenceMax.
    fence bigint NOT NULL CONSTRAINT "idemkit_lock_fences_fence_max" CHECK (fence <= 900000000000000)
);
