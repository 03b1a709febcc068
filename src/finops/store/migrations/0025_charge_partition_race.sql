-- Two charge runs that both find a month's partition missing no longer collide.
--
-- `finops_charge_partition` (0021) looks for the partition, waits for the advisory lock that
-- serialises the makers, and looks again. Waiting for an advisory lock does not make a session
-- read the catalog changes committed meanwhile, so the second look still missed the partition
-- the first run had just made, and the second run failed with "relation … already exists"
-- (its ledger pass failed, and the run with it). The second look now comes after the lock on
-- the default partition, which the function takes anyway and which does make the session read
-- them.
CREATE OR REPLACE FUNCTION finops_charge_partition(month timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    parent regclass := finops_charge_parent();
    lo timestamptz := date_trunc('month', month, 'UTC');
    hi timestamptz := (date_trunc('month', month AT TIME ZONE 'UTC') + interval '1 month')
                      AT TIME ZONE 'UTC';
    part text := 'subscription_charges_y' || to_char(lo AT TIME ZONE 'UTC', 'YYYY"m"MM');
BEGIN
    IF parent IS NULL THEN
        RETURN NULL;
    END IF;
    IF to_regclass(part) IS NOT NULL THEN
        RETURN part;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('finops_charge_partition'));
    -- No writer may add a row of the month to the default partition between the move and
    -- the attach (which takes this lock anyway). Taken before the second look: locking a
    -- table makes this session read the catalog changes committed while it waited, which
    -- waiting for the advisory lock does not, so a partition made meanwhile is seen.
    LOCK TABLE subscription_charges_default IN ACCESS EXCLUSIVE MODE;
    IF to_regclass(part) IS NOT NULL THEN
        RETURN part;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                   part, parent);
    EXECUTE format('WITH moved AS (DELETE FROM subscription_charges_default '
                   'WHERE hour >= %L AND hour < %L RETURNING *) '
                   'INSERT INTO %I SELECT * FROM moved', lo, hi, part);
    -- The ledger's indexes under names that say whose they are; attaching adopts them.
    EXECUTE format('CREATE INDEX %I ON %I (cluster, subscription_uid, hour) '
                   'WHERE NOT finalized', part || '_open', part);
    EXECUTE format('CREATE INDEX %I ON %I (subscription_version_id, hour) INCLUDE (cluster, '
                   'subscription_uid, source, currency, amount_micros, finalized)',
                   part || '_by_version_hour', part);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (hour >= %L AND hour < %L)',
                   part, part || '_range', lo, hi);
    EXECUTE format('ALTER TABLE %s ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   parent, part, lo, hi);
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', part, part || '_range');
    RETURN part;
END;
$$;
