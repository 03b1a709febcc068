-- finops:online
-- The charge ledger partitioned by UTC month (PostgreSQL declarative partitioning), converted
-- online: charge runs keep writing while the rows are copied, and wait only for the final
-- rename, which takes milliseconds. Every step is safe to repeat, and does nothing once
-- subscription_charges is partitioned. How:
--   1. an empty partitioned twin, subscription_charges_partitioned, with the ledger's columns,
--      checks and primary key, a default partition and the charge_days triggers; from then on
--      statement triggers on the ledger note the key of every row a writer inserts, updates
--      or deletes (writers touch nothing else, so they never wait for the conversion);
--   2. a partition for each month the ledger spans;
--   3. the rows copied in batches of table pages, each its own transaction;
--   4. the noted keys replayed: the twin's rows of those keys replaced by the ledger's as
--      they are now (again after step 5, and a last time in step 6);
--   5. the secondary indexes built with CREATE INDEX CONCURRENTLY, partition by partition;
--   6. one short transaction holding the ledger: the keys noted since replayed, the old
--      table dropped, the twin renamed into its place with the ledger's triggers.
-- A row no writer touched since step 1 is copied as it is; a row a writer touched is taken
-- from the ledger after the writer's change, under the final lock at the latest.
-- A month's partition is made by finops_charge_partition (0021) when a charge run is about to
-- write in it; rows of a month without one go to the default partition meanwhile.

CREATE OR REPLACE FUNCTION finops_charges_unpartitioned() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT relkind = 'r' FROM pg_class WHERE oid = 'subscription_charges'::regclass $$;

CREATE OR REPLACE FUNCTION finops_note_charge_changes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO subscription_charges_changed_meanwhile
            (cluster, subscription_uid, hour, source)
        SELECT cluster, subscription_uid, hour, source FROM added;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO subscription_charges_changed_meanwhile
            (cluster, subscription_uid, hour, source)
        SELECT cluster, subscription_uid, hour, source FROM removed;
    END IF;
    RETURN NULL;
END;
$$;

-- The noted keys visible now: the twin's rows of them replaced by the ledger's current rows.
-- A key noted by a transaction still running stays noted for the next replay.
CREATE OR REPLACE FUNCTION finops_replay_charge_changes() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    upto bigint;
    moved bigint;
BEGIN
    SELECT max(id) INTO upto FROM subscription_charges_changed_meanwhile;
    IF upto IS NULL THEN
        RETURN 0;
    END IF;
    CREATE TEMP TABLE charge_keys ON COMMIT DROP AS
        SELECT DISTINCT cluster, subscription_uid, hour, source
        FROM subscription_charges_changed_meanwhile WHERE id <= upto;
    DELETE FROM subscription_charges_partitioned p USING charge_keys k
    WHERE p.cluster = k.cluster AND p.subscription_uid = k.subscription_uid
      AND p.hour = k.hour AND p.source = k.source;
    INSERT INTO subscription_charges_partitioned
    SELECT c.* FROM subscription_charges c JOIN charge_keys k
      ON c.cluster = k.cluster AND c.subscription_uid = k.subscription_uid
     AND c.hour = k.hour AND c.source = k.source
    ORDER BY c.cluster, c.subscription_uid, c.hour, c.source;
    GET DIAGNOSTICS moved = ROW_COUNT;
    DELETE FROM subscription_charges_changed_meanwhile WHERE id <= upto;
    DROP TABLE charge_keys;
    RETURN moved;
END;
$$;

DO $$
BEGIN
    IF NOT finops_charges_unpartitioned() THEN
        RETURN;
    END IF;
    CREATE TABLE IF NOT EXISTS subscription_charges_partitioned
        (LIKE subscription_charges INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
        PARTITION BY RANGE (hour);
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conname = 'subscription_charges_partitioned_pkey') THEN
        ALTER TABLE subscription_charges_partitioned
            ADD CONSTRAINT subscription_charges_partitioned_pkey
            PRIMARY KEY (cluster, subscription_uid, hour, source);
    END IF;
    CREATE TABLE IF NOT EXISTS subscription_charges_default
        PARTITION OF subscription_charges_partitioned DEFAULT;
    CREATE TABLE IF NOT EXISTS subscription_charges_changed_meanwhile (
        id bigint GENERATED ALWAYS AS IDENTITY, cluster text, subscription_uid text,
        hour timestamptz, source text);
    CREATE OR REPLACE TRIGGER charge_days_inserted AFTER INSERT
        ON subscription_charges_partitioned REFERENCING NEW TABLE AS added
        FOR EACH STATEMENT EXECUTE FUNCTION finops_charge_days_change();
    CREATE OR REPLACE TRIGGER charge_days_updated AFTER UPDATE
        ON subscription_charges_partitioned REFERENCING OLD TABLE AS removed NEW TABLE AS added
        FOR EACH STATEMENT EXECUTE FUNCTION finops_charge_days_change();
    CREATE OR REPLACE TRIGGER charge_days_deleted AFTER DELETE
        ON subscription_charges_partitioned REFERENCING OLD TABLE AS removed
        FOR EACH STATEMENT EXECUTE FUNCTION finops_charge_days_change();
    CREATE OR REPLACE TRIGGER charge_days_truncated AFTER TRUNCATE
        ON subscription_charges_partitioned
        FOR EACH STATEMENT EXECUTE FUNCTION finops_charge_days_truncated();
    CREATE OR REPLACE TRIGGER charges_noted_inserted AFTER INSERT
        ON subscription_charges REFERENCING NEW TABLE AS added
        FOR EACH STATEMENT EXECUTE FUNCTION finops_note_charge_changes();
    CREATE OR REPLACE TRIGGER charges_noted_updated AFTER UPDATE
        ON subscription_charges REFERENCING OLD TABLE AS removed NEW TABLE AS added
        FOR EACH STATEMENT EXECUTE FUNCTION finops_note_charge_changes();
    CREATE OR REPLACE TRIGGER charges_noted_deleted AFTER DELETE
        ON subscription_charges REFERENCING OLD TABLE AS removed
        FOR EACH STATEMENT EXECUTE FUNCTION finops_note_charge_changes();
END;
$$;

-- finops:step each
SELECT format('SELECT finops_charge_partition(%L)', m)
FROM (SELECT min(hour) AS lo, max(hour) AS hi FROM subscription_charges
      WHERE finops_charges_unpartitioned()) b,
     generate_series(date_trunc('month', b.lo, 'UTC'), b.hi, interval '1 month') m
WHERE b.lo IS NOT NULL;

-- finops:step each
SELECT format('INSERT INTO subscription_charges_partitioned SELECT * FROM subscription_charges '
              'WHERE ctid >= %L::tid AND ctid < %L::tid '
              'ORDER BY cluster, subscription_uid, hour, source ON CONFLICT DO NOTHING',
              format('(%s,0)', p), format('(%s,0)', p + 4096))
FROM generate_series(0, pg_relation_size('subscription_charges')
                        / current_setting('block_size')::bigint, 4096) p
WHERE finops_charges_unpartitioned();

-- finops:step
SELECT finops_replay_charge_changes() WHERE finops_charges_unpartitioned();

-- finops:step each
-- A concurrent index build that failed leaves an invalid index; it is built again.
SELECT format('DROP INDEX CONCURRENTLY %s', i.indexrelid::regclass)
FROM pg_index i JOIN pg_inherits h ON h.inhrelid = i.indrelid
WHERE h.inhparent = 'subscription_charges_partitioned'::regclass AND NOT i.indisvalid
  AND finops_charges_unpartitioned();

-- finops:step
DO $$
BEGIN
    IF NOT finops_charges_unpartitioned() THEN
        RETURN;
    END IF;
    CREATE INDEX IF NOT EXISTS subscription_charges_partitioned_open
        ON ONLY subscription_charges_partitioned (cluster, subscription_uid, hour)
        WHERE NOT finalized;
    CREATE INDEX IF NOT EXISTS subscription_charges_partitioned_by_version_hour
        ON ONLY subscription_charges_partitioned (subscription_version_id, hour)
        INCLUDE (cluster, subscription_uid, source, currency, amount_micros, finalized);
END;
$$;

-- finops:step each
SELECT format(
    CASE x.name
        WHEN 'open' THEN 'CREATE INDEX CONCURRENTLY %I ON %s '
                         '(cluster, subscription_uid, hour) WHERE NOT finalized'
        ELSE 'CREATE INDEX CONCURRENTLY %I ON %s (subscription_version_id, hour) '
             'INCLUDE (cluster, subscription_uid, source, currency, amount_micros, finalized)'
    END, h.inhrelid::regclass::text || '_' || x.name, h.inhrelid::regclass)
FROM pg_inherits h,
     (VALUES ('open'), ('by_version_hour')) x(name)
WHERE h.inhparent = 'subscription_charges_partitioned'::regclass
  AND finops_charges_unpartitioned()
  AND to_regclass(h.inhrelid::regclass::text || '_' || x.name) IS NULL
  AND NOT EXISTS (
      SELECT 1 FROM pg_inherits ih JOIN pg_index i ON i.indexrelid = ih.inhrelid
      WHERE ih.inhparent = ('subscription_charges_partitioned_' || x.name)::regclass
        AND i.indrelid = h.inhrelid)
ORDER BY 1;

-- finops:step each
SELECT format('ALTER INDEX %s ATTACH PARTITION %s',
              'subscription_charges_partitioned_' || x.name,
              h.inhrelid::regclass::text || '_' || x.name)
FROM pg_inherits h,
     (VALUES ('open'), ('by_version_hour')) x(name)
WHERE h.inhparent = 'subscription_charges_partitioned'::regclass
  AND finops_charges_unpartitioned()
  AND to_regclass(h.inhrelid::regclass::text || '_' || x.name) IS NOT NULL
  AND NOT EXISTS (
      SELECT 1 FROM pg_inherits ih
      WHERE ih.inhparent = ('subscription_charges_partitioned_' || x.name)::regclass
        AND ih.inhrelid = (h.inhrelid::regclass::text || '_' || x.name)::regclass)
ORDER BY 1;

-- finops:step
SELECT finops_replay_charge_changes() WHERE finops_charges_unpartitioned();

-- finops:step
-- The switch. Writers wait from the LOCK to the end of this transaction; the lock is asked
-- for with a short timeout and again until granted, so a long charge run holding the ledger
-- never has every other statement queue behind this one for long.
DO $$
DECLARE
    got boolean := false;
BEGIN
    IF NOT finops_charges_unpartitioned() THEN
        RETURN;
    END IF;
    FOR attempt IN 1 .. 600 LOOP
        BEGIN
            SET LOCAL lock_timeout = '2s';
            LOCK TABLE subscription_charges, subscription_charges_partitioned
                IN ACCESS EXCLUSIVE MODE;
            got := true;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            PERFORM pg_sleep(1);
        END;
    END LOOP;
    IF NOT got THEN
        RAISE EXCEPTION 'the charge ledger stayed locked by other sessions; try again';
    END IF;
    SET LOCAL lock_timeout = 0;
    PERFORM finops_replay_charge_changes();
    DROP TABLE subscription_charges;
    DROP TABLE subscription_charges_changed_meanwhile;
    ALTER TABLE subscription_charges_partitioned RENAME TO subscription_charges;
    ALTER INDEX subscription_charges_partitioned_pkey RENAME TO subscription_charges_pkey;
    ALTER INDEX subscription_charges_partitioned_open RENAME TO subscription_charges_open;
    ALTER INDEX subscription_charges_partitioned_by_version_hour
        RENAME TO subscription_charges_by_version_hour;
    CREATE TRIGGER subscription_charges_versions_inserted AFTER INSERT
        ON subscription_charges REFERENCING NEW TABLE AS written
        FOR EACH STATEMENT EXECUTE FUNCTION finops_check_charge_versions();
    CREATE TRIGGER subscription_charges_versions_updated AFTER UPDATE
        ON subscription_charges REFERENCING NEW TABLE AS written
        FOR EACH STATEMENT EXECUTE FUNCTION finops_check_charge_versions();
    CREATE TRIGGER subscription_charges_closed_inserted AFTER INSERT
        ON subscription_charges REFERENCING NEW TABLE AS changed
        FOR EACH STATEMENT EXECUTE FUNCTION finops_refuse_closed_hours();
    CREATE TRIGGER subscription_charges_closed_updated AFTER UPDATE
        ON subscription_charges REFERENCING NEW TABLE AS changed
        FOR EACH STATEMENT EXECUTE FUNCTION finops_refuse_closed_hours();
    CREATE TRIGGER subscription_charges_closed_replaced AFTER UPDATE
        ON subscription_charges REFERENCING OLD TABLE AS changed
        FOR EACH STATEMENT EXECUTE FUNCTION finops_refuse_closed_hours();
    CREATE TRIGGER subscription_charges_closed_deleted AFTER DELETE
        ON subscription_charges REFERENCING OLD TABLE AS changed
        FOR EACH STATEMENT EXECUTE FUNCTION finops_refuse_closed_hours();
    CREATE TRIGGER subscription_charges_closed_truncated BEFORE TRUNCATE
        ON subscription_charges
        FOR EACH STATEMENT EXECUTE FUNCTION finops_refuse_truncate_closed();
END;
$$;

-- finops:step
DROP TABLE IF EXISTS subscription_charges_changed_meanwhile;
DROP FUNCTION IF EXISTS finops_note_charge_changes();
DROP FUNCTION IF EXISTS finops_replay_charge_changes();

-- finops:step
ANALYZE subscription_charges;
