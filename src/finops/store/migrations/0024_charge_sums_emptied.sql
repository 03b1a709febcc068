-- The charge sums' trigger (migration 0021) looks for emptied sums only when a sum lost rows.
--
-- A sum can reach zero rows only when a statement takes more rows out of one of its days than
-- it puts in. Inserts never do; updates do only when they move rows to another version,
-- Offering version or currency. The trigger used to look for emptied sums after every update
-- (three joins over the statement's rows), and the hourly charge run's promotion of the open
-- hour is such an update with nothing to find. Now the statement that adds the deltas also
-- says whether any day lost rows, and only then are the emptied sums deleted. Every day sum
-- that lost rows is a `d` row with a negative count, and a month or namespace sum loses rows
-- only through one of its days, so nothing is missed.
CREATE OR REPLACE FUNCTION finops_charge_days_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    delta text := CASE TG_OP
        WHEN 'INSERT' THEN 'SELECT *, 1 AS sign FROM added'
        WHEN 'DELETE' THEN 'SELECT *, -1 AS sign FROM removed'
        ELSE 'SELECT *, 1 AS sign FROM added UNION ALL SELECT *, -1 FROM removed' END;
    emptied boolean;
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
        SELECT EXISTS (SELECT 1 FROM d WHERE n < 0)
    $q$, delta) INTO emptied;
    IF TG_OP <> 'INSERT' AND emptied THEN
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
