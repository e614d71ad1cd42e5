-- idemkit store/mysqlstore schema, with the default table name
-- (idemkit_records), for MariaDB 10.6+ and MySQL 8.0.29+ (InnoDB).
-- mysqlstore.SetupSchema runs exactly these statements (for the name it is
-- given) under GET_LOCK('idemkit:schema', 30). Every statement is
-- idempotent, so migration tools may apply this file as it is, with the
-- mariadb or mysql client (it uses DELIMITER for the procedure's body).
-- The table and the procedure live in the connection's current database,
-- or in the database WithTable("db.table") names. Times are Unix
-- microseconds of the server's clock, UTC_TIMESTAMP(6), whatever the
-- session's time zone.
--
-- A table made before the steps and step_count columns existed is
-- upgraded by mysqlstore.SetupSchema, which first drops the claim
-- procedure of that time, then adds the two columns (an instant ALTER on
-- both servers), then runs this file. By hand, once:
--   DROP PROCEDURE IF EXISTS `idemkit_records_claim`;
--   ALTER TABLE `idemkit_records` ADD COLUMN steps MEDIUMBLOB NULL,
--       ADD COLUMN step_count TINYINT UNSIGNED NOT NULL DEFAULT 0;
-- then this file. Claims fail (Misconfigured) between the drop and the
-- new procedure's creation.

-- Records: one row per record key, holding a claim while its request runs,
-- then the request's outcome. A row past its keep_until is deleted by
-- Sweep (or taken over in place by a new claim before that).
CREATE TABLE IF NOT EXISTS `idemkit_records` (
    -- The record key, its bytes as given (binary: compared bytewise).
    record_key  VARBINARY(1024) NOT NULL,
    -- The request's fingerprint, as the caller gave it.
    fingerprint BLOB            NOT NULL,
    -- The fingerprint of a live claim when it is a lock id (22 base64url
    -- characters), for FindClaim; NULL otherwise.
    lock_id     VARBINARY(22)   NULL,
    -- 1 claimed, 2 completed, 3 executed but not replayable; 0 a tombstone
    -- (a released claim or a deleted record, kept only for its fence).
    state       TINYINT         NOT NULL,
    -- The encoded response when completed; empty otherwise.
    response    LONGBLOB        NOT NULL,
    -- The claim's fence: above every fence the key carried before. The
    -- check refuses, atomically, the claim that would pass idemkit.FenceMax.
    fence       BIGINT          NOT NULL CHECK (fence <= 900000000000000),
    -- When the claim was made or the outcome written.
    created_at  BIGINT          NOT NULL,
    -- A claim: when its lease runs out; an outcome: when it is forgotten.
    expires_at  BIGINT          NOT NULL,
    -- When Sweep may delete the row: past expires_at (a claim: one minute
    -- past it), and past the fence read as Unix milliseconds plus the
    -- largest clock step (mysqlstore.WithMaxClockStep).
    keep_until  BIGINT          NOT NULL,
    -- A claim's recorded steps (store.Stepper), in order, each its name's
    -- bytes, its result's bytes, then the name's length (1 byte) and the
    -- result's length (4 bytes, big-endian): read from the end. NULL when
    -- there are none; a release's tombstone keeps them (and its
    -- fingerprint) for the next claim of the same fingerprint.
    steps       MEDIUMBLOB      NULL,
    -- How many steps the steps column holds.
    step_count  TINYINT UNSIGNED NOT NULL DEFAULT 0,
    PRIMARY KEY (record_key),
    -- Sweep: the rows past keep_until, oldest first, without a scan.
    KEY `idemkit_records_keep_until_idx` (keep_until),
    -- FindClaim: a live claim by its lock id.
    KEY `idemkit_records_lock_id_idx` (lock_id)
) ENGINE=InnoDB;

-- Claim: mysqlstore's claim of key k, one CALL that answers one row
-- (claimed, fingerprint, state, response, fence, created_at, expires_at),
-- or none when the row kept changing under it (the caller calls again).
-- A live row (a replay, or busy) is answered by its first, consistent
-- read alone: no lock, no write. A key with no row gets a claim inserted;
-- a dead row (a tombstone, a run-out claim, an expired outcome) is taken
-- over in place by an UPDATE that matches the row exactly as it was read
-- (its step count too), its fence above the last one, answering the
-- replaced row's fingerprint and response; a live one (a racing claim
-- won) is answered as it is. A dead claim or a release's tombstone of the
-- same fingerprint, still within its keep_until, passes its steps (and
-- that keep) to the new claim, which answers them in the response column
-- with claimed = 2 (what such a row replaced had no response); any other
-- take-over drops them. Reads after a lost race are locking reads, which
-- see the newest row also inside a caller's REPEATABLE READ transaction.
-- The fence is the clock in milliseconds, above the row's fence; a row is
-- kept past its lease plus the retention, and past its fence read as a
-- time plus the step (durations in microseconds).
DELIMITER //
CREATE PROCEDURE IF NOT EXISTS `idemkit_records_claim`(k VARBINARY(1024), fp BLOB, lid VARBINARY(22),
    lease BIGINT, retain BIGINT, step BIGINT)
    MODIFIES SQL DATA SQL SECURITY INVOKER
BEGIN
    DECLARE t, ms, nf, v_fence, v_created, v_expires, v_keep BIGINT;
    DECLARE v_state TINYINT;
    DECLARE v_count INT;
    DECLARE v_fp BLOB;
    DECLARE v_response LONGBLOB;
    DECLARE carry BOOLEAN;
    DECLARE tries, dup INT DEFAULT 0;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_state = NULL;
    DECLARE CONTINUE HANDLER FOR 1062 SET dup = 1; -- ER_DUP_ENTRY: a racing claim inserted first
    claim: LOOP
        SET tries = tries + 1, v_state = NULL;
        IF tries > 3 THEN
            SELECT 1 FROM DUAL WHERE FALSE; -- no row: the caller calls again
            LEAVE claim;
        END IF;
        SET t = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6));
        SET ms = GREATEST(t DIV 1000, 1);
        IF tries = 1 THEN
            SELECT r.state, r.fingerprint, r.response, r.fence, r.created_at, r.expires_at, r.keep_until, r.step_count
                INTO v_state, v_fp, v_response, v_fence, v_created, v_expires, v_keep, v_count
                FROM `idemkit_records` AS r WHERE r.record_key = k;
        ELSE
            SELECT r.state, r.fingerprint, r.response, r.fence, r.created_at, r.expires_at, r.keep_until, r.step_count
                INTO v_state, v_fp, v_response, v_fence, v_created, v_expires, v_keep, v_count
                FROM `idemkit_records` AS r WHERE r.record_key = k FOR UPDATE;
        END IF;
        IF v_state IS NULL THEN
            SET dup = 0;
            INSERT INTO `idemkit_records` (record_key, fingerprint, lock_id, state, response, fence, created_at, expires_at, keep_until)
                VALUES (k, fp, lid, 1, '', ms, t, t + lease, GREATEST(t + lease + retain, (ms + 1) * 1000 + step));
            IF dup = 0 THEN
                SELECT 1, fp, 1, '', ms, t, t + lease;
                LEAVE claim;
            END IF;
        ELSEIF v_state <> 0 AND v_expires > t THEN
            SELECT 0, v_fp, v_state, v_response, v_fence, v_created, v_expires; -- busy, or an outcome
            LEAVE claim;
        ELSE
            SET nf = GREATEST(v_fence + 1, ms);
            SET carry = v_count > 0 AND v_state IN (0, 1) AND v_fp = fp AND v_keep > t;
            UPDATE `idemkit_records` SET fingerprint = fp, lock_id = lid, state = 1, response = '', fence = nf,
                created_at = t, expires_at = t + lease,
                keep_until = GREATEST(IF(carry, keep_until, 0), t + lease + retain, (nf + 1) * 1000 + step),
                steps = IF(carry, steps, NULL), step_count = IF(carry, step_count, 0)
                WHERE record_key = k AND fence = v_fence AND state = v_state AND created_at = v_created AND expires_at = v_expires
                    AND step_count = v_count;
            IF ROW_COUNT() > 0 THEN
                IF carry THEN -- the steps carried over, read back by the primary key
                    SELECT 2, v_fp, 1, (SELECT r.steps FROM `idemkit_records` AS r WHERE r.record_key = k), nf, t, t + lease;
                ELSE -- with the replaced row's fingerprint and response
                    SELECT 1, v_fp, 1, v_response, nf, t, t + lease;
                END IF;
                LEAVE claim;
            END IF;
        END IF;
    END LOOP;
END//
DELIMITER ;
