-- The charge sums (migration 0021) are applied once per transaction, at its commit.
--
-- Until now every statement that wrote charge rows added its change to the three tables of
-- sums at once. An hourly charge run writes in several statements (the previous hour's rows
-- finalized, the new hour's inserted, stale open rows deleted) that all land on the same day
-- and month sums, so each of those sums was rewritten once per statement: 60k upserts an hour
-- at 10k Subscriptions where 30k do.
--
-- Now each statement only sums its own rows by day and version into a temporary table of the
-- session (`charge_sum_deltas`, emptied at every commit) and marks its transaction in
-- `charge_sums_pending`. A deferred constraint trigger on that mark runs when the transaction
-- commits: it adds the transaction's deltas to the sums in key order and deletes the sums left
-- without rows. So the sums still never disagree with the rows in anything another session
-- can see: the rows and their sums become visible in the same commit, and a statement or a
-- transaction that fails takes its deltas with it. Only the writing transaction itself sees
-- its own rows before their sums; `SET CONSTRAINTS charge_sums_at_commit IMMEDIATE` applies
-- them at once (the product reads sums only in transactions that write no charge rows).
CREATE UNLOGGED TABLE charge_sums_pending (
    txid xid8 PRIMARY KEY
);

-- A statement's change of the sums: its transition tables, signed and summed per UTC day and
-- version, appended to the session's deltas; the transaction is marked once.
CREATE OR REPLACE FUNCTION finops_charge_days_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    delta text := CASE TG_OP
        WHEN 'INSERT' THEN 'SELECT *, 1 AS sign FROM added'
        WHEN 'DELETE' THEN 'SELECT *, -1 AS sign FROM removed'
        ELSE 'SELECT *, 1 AS sign FROM added UNION ALL SELECT *, -1 FROM removed' END;
BEGIN
    IF to_regclass('pg_temp.charge_sum_deltas') IS NULL THEN
        CREATE TEMP TABLE charge_sum_deltas (
            cluster                 text        NOT NULL,
            day                     timestamptz NOT NULL,
            subscription_version_id bigint      NOT NULL,
            offering_version_id     bigint      NOT NULL,
            source                  text        NOT NULL,
            currency                text        NOT NULL,
            amount_micros           numeric     NOT NULL,
            finalized_micros        numeric     NOT NULL,
            charge_rows             bigint      NOT NULL
        ) ON COMMIT DELETE ROWS;
    END IF;
    EXECUTE format($q$
        INSERT INTO pg_temp.charge_sum_deltas
        SELECT cluster, date_trunc('day', hour, 'UTC'), subscription_version_id,
               offering_version_id, source, currency, sum(sign * amount_micros),
               coalesce(sum(sign * amount_micros) FILTER (WHERE finalized), 0), sum(sign)
        FROM (%s) r
        GROUP BY 1, 2, 3, 4, 5, 6
    $q$, delta);
    INSERT INTO charge_sums_pending VALUES (pg_current_xact_id()) ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;

-- At commit: the transaction's deltas summed per key (a key whose changes cancel out is left
-- alone, so a row inserted and deleted again never makes an empty sum), added to each table
-- of sums in key order (two writers lock shared sums in the same order), then the sums whose
-- rows all went are deleted. A sum reaches zero rows only when its own count went down, and a
-- month or namespace sum only through one of its days, so the day keys with a negative count
-- are the only places to look.
CREATE FUNCTION finops_charge_sums_apply() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    emptied boolean;
BEGIN
    DELETE FROM charge_sums_pending WHERE txid = NEW.txid;
    IF to_regclass('pg_temp.charge_sum_deltas') IS NULL THEN
        RETURN NULL;
    END IF;
    WITH d AS MATERIALIZED (
        SELECT cluster, day, subscription_version_id, offering_version_id, source, currency,
               sum(amount_micros) AS amount, sum(finalized_micros) AS final,
               sum(charge_rows) AS n
        FROM pg_temp.charge_sum_deltas
        GROUP BY 1, 2, 3, 4, 5, 6
        HAVING sum(charge_rows) <> 0 OR sum(amount_micros) <> 0 OR sum(finalized_micros) <> 0
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
        ON CONFLICT (cluster, month, subscription_version_id, offering_version_id, source,
                     currency)
        DO UPDATE SET amount_micros = t.amount_micros + EXCLUDED.amount_micros,
                      finalized_micros = t.finalized_micros + EXCLUDED.finalized_micros,
                      charge_rows = t.charge_rows + EXCLUDED.charge_rows
    ), namespaces AS (
        INSERT INTO charge_namespace_days AS t
        SELECT d.cluster, d.day, v.namespace, d.source, d.currency, sum(d.amount),
               sum(d.final), sum(d.n)
        FROM d JOIN subscription_versions v ON v.id = d.subscription_version_id
        GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
        ON CONFLICT (cluster, day, namespace, source, currency)
        DO UPDATE SET amount_micros = t.amount_micros + EXCLUDED.amount_micros,
                      finalized_micros = t.finalized_micros + EXCLUDED.finalized_micros,
                      charge_rows = t.charge_rows + EXCLUDED.charge_rows
    )
    SELECT EXISTS (SELECT 1 FROM d WHERE n < 0) INTO emptied;
    IF emptied THEN
        DELETE FROM charge_days t
        USING (SELECT cluster, day, subscription_version_id, offering_version_id, source,
                      currency
               FROM pg_temp.charge_sum_deltas GROUP BY 1, 2, 3, 4, 5, 6
               HAVING sum(charge_rows) < 0) r
        WHERE t.charge_rows = 0 AND t.cluster = r.cluster AND t.day = r.day
          AND t.subscription_version_id = r.subscription_version_id
          AND t.offering_version_id = r.offering_version_id AND t.source = r.source
          AND t.currency = r.currency;
        DELETE FROM charge_months t
        USING (SELECT DISTINCT cluster, date_trunc('month', day, 'UTC') AS month,
                      subscription_version_id, offering_version_id, source, currency
               FROM (SELECT cluster, day, subscription_version_id, offering_version_id,
                            source, currency
                     FROM pg_temp.charge_sum_deltas GROUP BY 1, 2, 3, 4, 5, 6
                     HAVING sum(charge_rows) < 0) l) r
        WHERE t.charge_rows = 0 AND t.cluster = r.cluster AND t.month = r.month
          AND t.subscription_version_id = r.subscription_version_id
          AND t.offering_version_id = r.offering_version_id AND t.source = r.source
          AND t.currency = r.currency;
        DELETE FROM charge_namespace_days t
        USING (SELECT DISTINCT r.cluster, r.day, v.namespace, r.source, r.currency
               FROM (SELECT cluster, day, subscription_version_id, offering_version_id,
                            source, currency
                     FROM pg_temp.charge_sum_deltas GROUP BY 1, 2, 3, 4, 5, 6
                     HAVING sum(charge_rows) < 0) r
               JOIN subscription_versions v ON v.id = r.subscription_version_id) r
        WHERE t.charge_rows = 0 AND t.cluster = r.cluster AND t.day = r.day
          AND t.namespace = r.namespace AND t.source = r.source AND t.currency = r.currency;
    END IF;
    TRUNCATE pg_temp.charge_sum_deltas;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER charge_sums_at_commit AFTER INSERT ON charge_sums_pending
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION finops_charge_sums_apply();

-- Truncating the ledger empties its sums and the deltas not yet applied, in the same
-- transaction.
CREATE OR REPLACE FUNCTION finops_charge_days_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE charge_days, charge_months, charge_namespace_days;
    IF to_regclass('pg_temp.charge_sum_deltas') IS NOT NULL THEN
        TRUNCATE pg_temp.charge_sum_deltas;
    END IF;
    RETURN NULL;
END;
$$;
