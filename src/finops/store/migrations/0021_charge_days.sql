-- Daily and monthly sums of the charge ledger, and monthly partitions of it.
--
-- Three tables of sums, each row the sum of the charge rows' amounts (and of the finalized
-- ones) and how many rows there are:
--   charge_days             per cluster, UTC day, Subscription version, Offering version,
--                           source and currency;
--   charge_months           the same per UTC month;
--   charge_namespace_days   per cluster, UTC day, namespace (of the version), source and
--                           currency.
-- Readers across every namespace (the dashboard's "All" over a month) and the charge run's
-- month-to-date read-back sum these instead of millions of hourly rows. Statement triggers on
-- subscription_charges maintain them in the writing statement's own transaction, from the rows
-- that statement wrote, so they can never disagree with the rows: a statement that fails or
-- rolls back takes its change of the sums with it. The triggers are attached to the
-- partitioned ledger by migration 0022.
CREATE TABLE charge_days (
    cluster                 text        NOT NULL,
    day                     timestamptz NOT NULL
        CHECK (date_trunc('day', day, 'UTC') = day),
    subscription_version_id bigint      NOT NULL,
    offering_version_id     bigint      NOT NULL,
    source                  text        NOT NULL,
    currency                text        NOT NULL,
    amount_micros           bigint      NOT NULL,
    finalized_micros        bigint      NOT NULL,
    charge_rows             bigint      NOT NULL,
    PRIMARY KEY (cluster, day, subscription_version_id, offering_version_id, source, currency)
);

CREATE TABLE charge_months (
    cluster                 text        NOT NULL,
    month                   timestamptz NOT NULL
        CHECK (date_trunc('month', month, 'UTC') = month),
    subscription_version_id bigint      NOT NULL,
    offering_version_id     bigint      NOT NULL,
    source                  text        NOT NULL,
    currency                text        NOT NULL,
    amount_micros           bigint      NOT NULL,
    finalized_micros        bigint      NOT NULL,
    charge_rows             bigint      NOT NULL,
    PRIMARY KEY (cluster, month, subscription_version_id, offering_version_id, source, currency)
);

CREATE TABLE charge_namespace_days (
    cluster          text        NOT NULL,
    day              timestamptz NOT NULL CHECK (date_trunc('day', day, 'UTC') = day),
    namespace        text        NOT NULL,
    source           text        NOT NULL,
    currency         text        NOT NULL,
    amount_micros    bigint      NOT NULL,
    finalized_micros bigint      NOT NULL,
    charge_rows      bigint      NOT NULL,
    PRIMARY KEY (cluster, day, namespace, source, currency)
);

-- One function for the three triggers: the statement's transition table `added` (sign +1)
-- and/or `removed` (sign -1) summed once per day and version, then added to each table of
-- sums in key order (two writers lock shared sums in the same order). A sum whose rows all
-- went is deleted, so every row of sums stands for at least one charge row.
CREATE FUNCTION finops_charge_days_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    delta text := CASE TG_OP
        WHEN 'INSERT' THEN 'SELECT *, 1 AS sign FROM added'
        WHEN 'DELETE' THEN 'SELECT *, -1 AS sign FROM removed'
        ELSE 'SELECT *, 1 AS sign FROM added UNION ALL SELECT *, -1 FROM removed' END;
BEGIN
    EXECUTE format($q$
        WITH d AS MATERIALIZED (
            SELECT cluster, date_trunc('day', hour, 'UTC') AS day, subscription_version_id,
                   offering_version_id, source, currency,
                   sum(sign * amount_micros) AS amount,
                   coalesce(sum(sign * amount_micros) FILTER (WHERE finalized), 0) AS final,
                   sum(sign) AS n
            FROM (%s) r
            GROUP BY 1, 2, 3, 4, 5, 6
        ), days AS (
            INSERT INTO charge_days AS t
            SELECT * FROM d ORDER BY 1, 2, 3, 4, 5, 6
            ON CONFLICT (cluster, day, subscription_version_id, offering_version_id, source,
                         currency)
            DO UPDATE SET amount_micros = t.amount_micros + EXCLUDED.amount_micros,
                          finalized_micros = t.finalized_micros + EXCLUDED.finalized_micros,
                          charge_rows = t.charge_rows + EXCLUDED.charge_rows
        ), months AS (
            INSERT INTO charge_months AS t
            SELECT cluster, date_trunc('month', day, 'UTC'), subscription_version_id,
                   offering_version_id, source, currency, sum(amount), sum(final), sum(n)
            FROM d GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6
            ON CONFLICT (cluster, month, subscription_version_id, offering_version_id,
                         source, currency)
            DO UPDATE SET amount_micros = t.amount_micros + EXCLUDED.amount_micros,
                          finalized_micros = t.finalized_micros + EXCLUDED.finalized_micros,
                          charge_rows = t.charge_rows + EXCLUDED.charge_rows
        )
        INSERT INTO charge_namespace_days AS t
        SELECT d.cluster, d.day, v.namespace, d.source, d.currency, sum(d.amount),
               sum(d.final), sum(d.n)
        FROM d JOIN subscription_versions v ON v.id = d.subscription_version_id
        GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
        ON CONFLICT (cluster, day, namespace, source, currency)
        DO UPDATE SET amount_micros = t.amount_micros + EXCLUDED.amount_micros,
                      finalized_micros = t.finalized_micros + EXCLUDED.finalized_micros,
                      charge_rows = t.charge_rows + EXCLUDED.charge_rows
    $q$, delta);
    IF TG_OP <> 'INSERT' THEN
        DELETE FROM charge_days t
        USING (SELECT DISTINCT cluster, date_trunc('day', hour, 'UTC') AS day,
                      subscription_version_id, offering_version_id, source, currency
               FROM removed) r
        WHERE t.charge_rows = 0 AND t.cluster = r.cluster AND t.day = r.day
          AND t.subscription_version_id = r.subscription_version_id
          AND t.offering_version_id = r.offering_version_id AND t.source = r.source
          AND t.currency = r.currency;
        DELETE FROM charge_months t
        USING (SELECT DISTINCT cluster, date_trunc('month', hour, 'UTC') AS month,
                      subscription_version_id, offering_version_id, source, currency
               FROM removed) r
        WHERE t.charge_rows = 0 AND t.cluster = r.cluster AND t.month = r.month
          AND t.subscription_version_id = r.subscription_version_id
          AND t.offering_version_id = r.offering_version_id AND t.source = r.source
          AND t.currency = r.currency;
        DELETE FROM charge_namespace_days t
        USING (SELECT DISTINCT r.cluster, date_trunc('day', r.hour, 'UTC') AS day,
                      v.namespace, r.source, r.currency
               FROM removed r JOIN subscription_versions v ON v.id = r.subscription_version_id) r
        WHERE t.charge_rows = 0 AND t.cluster = r.cluster AND t.day = r.day
          AND t.namespace = r.namespace AND t.source = r.source AND t.currency = r.currency;
    END IF;
    RETURN NULL;
END;
$$;

-- Truncating the ledger empties its sums in the same transaction.
CREATE FUNCTION finops_charge_days_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE charge_days, charge_months, charge_namespace_days;
    RETURN NULL;
END;
$$;

-- The partitioned charge table: the ledger itself once migration 0022 has converted it, the
-- table it converts into until then; NULL before that.
CREATE FUNCTION finops_charge_parent() RETURNS regclass
    LANGUAGE sql STABLE
    AS $$
        SELECT c.oid::regclass FROM pg_class c
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'p'
          AND c.relname IN ('subscription_charges', 'subscription_charges_partitioned')
        ORDER BY c.relname = 'subscription_charges' DESC LIMIT 1
    $$;

-- The partition of one UTC month, `subscription_charges_yYYYYmMM`, made when missing. Rows of
-- that month already in the default partition move into it first (the default partition is
-- locked meanwhile: keep it small by making partitions ahead). Serialised by a transaction lock, so two runs
-- making the same month do not collide. Returns the partition's name.
CREATE FUNCTION finops_charge_partition(month timestamptz) RETURNS text
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
    IF to_regclass(part) IS NOT NULL THEN
        RETURN part;
    END IF;
    -- No writer may add a row of the month to the default partition between the move and
    -- the attach (which takes this lock anyway).
    LOCK TABLE subscription_charges_default IN ACCESS EXCLUSIVE MODE;
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
