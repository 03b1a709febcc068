"""`subscription_charges`: hourly charge rows, the watermark, and the sums `status.costs` reads.

A charge row is keyed on (cluster, subscription UID, hour, source), so a replayed run
upserts the same rows. A finalized row is billed history and no later upsert changes it; a
non-finalized row (the hour in progress, or usage whose allocations had not settled) is
rewritten and may be promoted to finalized. Functions run in the caller's transaction.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any

import psycopg

from finops.billing import ticks
from finops.store import partitions

COLUMNS = (
    "cluster",
    "subscription_uid",
    "hour",
    "source",
    "quantity",
    "unit_price_micros",
    "amount_micros",
    "currency",
    "finalized",
    "offering_version_id",
    "subscription_version_id",
    "pricebook_id",
    "covers_start",
    "covers_end",
)
_KEY = ("cluster", "subscription_uid", "hour", "source")
UPDATED = tuple(c for c in COLUMNS if c not in _KEY)
"""The columns a replayed charge row may change (everything but its idempotency key)."""


# The watermarks without reading every fee row since the bound (that grew with the ledger's
# history, every hourly run). Per Subscription: its first open hour (the partial index of open
# rows) and its first fee hour since the bound (a primary-key probe). The span to check ends at
# the hour before the first open one (no later hour can be the watermark), or without open rows
# at the last fee hour (one more probe). Then, from the monthly sums, the first month whose fee
# rows in the span fall short of its hours: rows are unique per hour, so a full count means a
# fee row in every hour. The first month's rows in the span are counted from its shorter side:
# the rows before the span, taken off the month's sum, or the rows from the span's start to the
# month's end (once a period is closed the span starts in the closed month's last hour, and
# counting that month's rows before it read a month of index entries per Subscription every
# run). Either side is known without a probe when it is empty, or when it is that last hour
# alone (hours are whole, and `lo` is a fee row); a month is longer than two hours, so each of
# those cases is on its own side. The last month's rows after the span are counted by a short
# range probe and taken off. Only from a short month on are the fee rows read, for the exact
# hole, by key per Subscription (`OFFSET 0` keeps that a probe whatever the planner guesses,
# never a ledger scan). With no short month and open rows, the span's last hour is the watermark
# (every row before an open one is final); else it is one backward primary-key probe. Exact as
# `tests/oracle/watermarks.py`, the statement it replaces. Months are stepped in UTC (`AT TIME
# ZONE 'UTC'`), not in the session's zone, where a month after 1 March 00:00 UTC can be 28 or 31
# March.
_WATERMARKS = """
    WITH u AS (SELECT DISTINCT unnest(%(uids)s::text[]) AS uid),
    open AS MATERIALIZED (
        SELECT subscription_uid AS uid, min(hour) AS first_open FROM subscription_charges
        WHERE cluster = %(cluster)s AND subscription_uid = ANY(%(uids)s) AND NOT finalized
        GROUP BY 1
    ), span AS MATERIALIZED (
        SELECT u.uid, f.lo, l.hi, m.start AS lo_month,
               date_trunc('month', l.hi, 'UTC') AS hi_month, b.before, b.tail, a.after
        FROM u
        LEFT JOIN open o ON o.uid = u.uid
        CROSS JOIN LATERAL ({first}) f
        CROSS JOIN LATERAL (
            SELECT CASE WHEN o.first_open IS NOT NULL THEN o.first_open - interval '1 hour'
                   ELSE (SELECT max(hour) FROM subscription_charges
                         WHERE cluster = %(cluster)s AND subscription_uid = u.uid
                           AND source = 'subscription' {bound})
                   END AS hi) l
        CROSS JOIN LATERAL (
            SELECT date_trunc('month', f.lo, 'UTC') AS start,
                   (date_trunc('month', f.lo AT TIME ZONE 'UTC') + interval '1 month')
                       AT TIME ZONE 'UTC' AS stop) m
        CROSS JOIN LATERAL (
            SELECT CASE WHEN f.lo = m.start THEN 0
                        WHEN f.lo - m.start <= m.stop - f.lo THEN (
                       SELECT count(*) FROM subscription_charges
                       WHERE cluster = %(cluster)s AND subscription_uid = u.uid
                         AND source = 'subscription' AND hour >= m.start AND hour < f.lo)
                   END AS before,
                   CASE WHEN m.stop - f.lo = interval '1 hour' THEN 1
                        WHEN f.lo - m.start > m.stop - f.lo THEN (
                       SELECT count(*) FROM subscription_charges
                       WHERE cluster = %(cluster)s AND subscription_uid = u.uid
                         AND source = 'subscription' AND hour >= f.lo AND hour < m.stop)
                   END AS tail) b
        CROSS JOIN LATERAL (
            SELECT count(*) AS after FROM subscription_charges
            WHERE cluster = %(cluster)s AND subscription_uid = u.uid AND source = 'subscription'
              AND hour > l.hi
              AND hour < (date_trunc('month', l.hi AT TIME ZONE 'UTC') + interval '1 month')
                         AT TIME ZONE 'UTC') a
        WHERE f.lo IS NOT NULL AND l.hi >= f.lo
    ), counted AS (
        SELECT v.uid, m.month, sum(m.charge_rows) AS n
        FROM charge_months m
        JOIN subscription_versions v ON v.id = m.subscription_version_id
        JOIN span s ON s.uid = v.uid
        WHERE m.cluster = %(cluster)s AND v.cluster = %(cluster)s AND m.source = 'subscription'
          AND m.month >= (SELECT min(lo_month) FROM span)
          AND m.month >= s.lo_month AND m.month <= s.hi
        GROUP BY 1, 2
    ), short AS MATERIALIZED (
        SELECT s.uid, min(g.month) AS month
        FROM span s
        CROSS JOIN LATERAL (
            SELECT m AT TIME ZONE 'UTC' AS month,
                   (m + interval '1 month') AT TIME ZONE 'UTC' AS month_end
            FROM generate_series(s.lo_month AT TIME ZONE 'UTC', s.hi AT TIME ZONE 'UTC',
                                 interval '1 month') m) g
        LEFT JOIN counted c ON c.uid = s.uid AND c.month = g.month
        WHERE CASE WHEN g.month = s.lo_month THEN coalesce(s.tail, coalesce(c.n, 0) - s.before)
                   ELSE coalesce(c.n, 0) END
              - CASE WHEN g.month = s.hi_month THEN s.after ELSE 0 END
              < extract(epoch FROM least(g.month_end, s.hi + interval '1 hour')
                                   - greatest(g.month, s.lo)) / 3600
        GROUP BY s.uid
    ), fee AS (
        SELECT k.uid, c.hour,
               lead(c.hour) OVER (PARTITION BY k.uid ORDER BY c.hour) AS next_hour
        FROM short k JOIN span s ON s.uid = k.uid
        CROSS JOIN LATERAL (
            SELECT hour FROM subscription_charges
            WHERE cluster = %(cluster)s AND subscription_uid = k.uid
              AND source = 'subscription'
              AND hour >= greatest(s.lo, k.month - interval '1 hour')
            OFFSET 0) c
    ), hole AS MATERIALIZED (
        SELECT uid, min(hour) AS before_hole FROM fee
        WHERE next_hour > hour + interval '1 hour'
        GROUP BY uid
    )
    SELECT u.uid, w.hour FROM u
    LEFT JOIN open o ON o.uid = u.uid
    LEFT JOIN span s ON s.uid = u.uid
    LEFT JOIN short k ON k.uid = u.uid
    LEFT JOIN hole h ON h.uid = u.uid
    CROSS JOIN LATERAL (
        SELECT CASE WHEN o.first_open IS NOT NULL AND s.uid IS NOT NULL AND k.uid IS NULL
               THEN s.hi
               ELSE (SELECT max(c.hour) FROM subscription_charges c
                     WHERE c.cluster = %(cluster)s AND c.subscription_uid = u.uid
                       AND c.finalized AND c.hour < coalesce(o.first_open, 'infinity')
                       AND c.hour <= coalesce(h.before_hole, 'infinity'))
               END AS hour
    ) w
    WHERE w.hour IS NOT NULL
"""

# A Subscription's first fee hour (the span's start). With a bound it is nearly always the
# first hour the bound lets in, the last hour of the closed periods (billed by then): one key
# lookup in that hour's partition. Only when that row is missing are the later hours searched,
# each later partition's index descended once (a plain `min` from the bound descends them all,
# every time). `OFFSET 0` keeps it one evaluation: pulled up, the expression would be copied
# into every use of `lo`.
_FIRST_FEE = """
    SELECT min(hour) AS lo FROM subscription_charges
    WHERE cluster = %(cluster)s AND subscription_uid = u.uid AND source = 'subscription'
"""
_FIRST_FEE_SINCE = """
    SELECT coalesce(
        (SELECT hour FROM subscription_charges
         WHERE cluster = %(cluster)s AND subscription_uid = u.uid AND source = 'subscription'
           AND hour = %(since)s - interval '1 hour'),
        (SELECT min(hour) FROM subscription_charges
         WHERE cluster = %(cluster)s AND subscription_uid = u.uid AND source = 'subscription'
           AND hour > %(since)s - interval '1 hour')) AS lo
    OFFSET 0
"""


def watermarks(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    subscription_uids: Collection[str],
    since: dt.datetime | None = None,
) -> dict[str, dt.datetime]:
    """Per Subscription, the latest finalized hour with no non-finalized hour before it.

    The collector resumes after it: a usage row left open behind the allocation boundary
    holds the watermark back so that hour is recomputed. So does a hole in the fee rows (the
    fee writes one row for every hour, so a missing hour between two of them was removed by
    hand): the watermark stops before it and the next run writes it again. Subscriptions
    with no finalized charge are absent. With `since` (the end of the closed periods), a hole
    before it does not count: closed hours are never written again (a missing one becomes a
    correction), so the run resumes in the open periods.
    """
    bound = "AND hour >= %(since)s - interval '1 hour'" if since is not None else ""
    first = _FIRST_FEE if since is None else _FIRST_FEE_SINCE
    rows = conn.execute(
        _WATERMARKS.format(bound=bound, first=first).encode(),
        {"cluster": cluster, "uids": list(subscription_uids), "since": since},
    ).fetchall()
    return {str(uid): hour.astimezone(dt.UTC) for uid, hour in rows}


# The three windows of a charge run's buckets from the sums kept beside the rows: the month's
# sums (`charge_months`) less the sums of its days from the hour's day on (`charge_days`) is
# the month before that day; the day's sums less the rows from the hour to the day's end is
# the day before the hour; those rows give the hour. Only the rows from the hour on are read,
# so the read costs the same at 23:00 as at 00:00 (summing the day's rows grew with the hour).
_BUCKET_SUMS = """
    WITH months AS (
        SELECT v.uid, m.source, sum(m.amount_micros) AS amount
        FROM charge_months m JOIN subscription_versions v ON v.id = m.subscription_version_id
        WHERE m.cluster = %(cluster)s AND m.month = %(month)s AND v.cluster = %(cluster)s
          AND v.uid = ANY(%(uids)b)
        GROUP BY 1, 2
    ), days AS (
        SELECT v.uid, d.source, sum(d.amount_micros) AS amount,
               coalesce(sum(d.amount_micros) FILTER (WHERE d.day = %(day)s), 0) AS today
        FROM charge_days d JOIN subscription_versions v ON v.id = d.subscription_version_id
        WHERE d.cluster = %(cluster)s AND d.day >= %(day)s AND d.day < %(next)s
          AND v.cluster = %(cluster)s AND v.uid = ANY(%(uids)b)
        GROUP BY 1, 2
    ), later AS (
        SELECT subscription_uid AS uid, source,
               coalesce(sum(amount_micros) FILTER (WHERE hour < %(day_end)s), 0) AS rest_of_day,
               coalesce(sum(amount_micros) FILTER (WHERE hour < %(hour_end)s), 0) AS this_hour
        FROM subscription_charges
        WHERE cluster = %(cluster)s AND subscription_uid = ANY(%(uids)b)
          AND hour >= %(hour)s AND hour < %(next)s
        GROUP BY 1, 2
    )
    SELECT uid, source, coalesce(months.amount, 0) - coalesce(days.amount, 0),
           coalesce(days.today, 0) - coalesce(later.rest_of_day, 0), coalesce(later.this_hour, 0)
    FROM months FULL JOIN days USING (uid, source) FULL JOIN later USING (uid, source)
"""


def bucket_sums(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    subscription_uids: Collection[str],
    hour: dt.datetime,
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """Per Subscription and source, the sums of `[month start, day start)`, `[day start,
    hour)` and `[hour, hour + 1h)` for the UTC day and month of the whole hour `hour`, in one
    query: what a charge run reads back for the buckets every hour. A sum that comes to zero
    is left out."""
    ticks.require_aware(hour=hour)
    if hour != ticks.floor_hour(hour):
        raise ValueError(f"hour {hour.isoformat()} is not a whole hour")
    month, day = ticks.floor_month(hour), ticks.floor_day(hour)
    params: dict[str, Any] = {
        "cluster": cluster,
        "uids": list(subscription_uids),
        "month": month,
        "day": day,
        "next": partitions.add_months(month, 1),
        "day_end": day + ticks.DAY,
        "hour": hour,
        "hour_end": hour + ticks.HOUR,
    }
    windows: tuple[dict[str, dict[str, int]], ...] = ({}, {}, {})
    for uid, source, *sums in conn.execute(_BUCKET_SUMS.encode(), params).fetchall():
        for window, total in zip(windows, sums, strict=True):
            if total:
                window.setdefault(str(uid), {})[str(source)] = int(total)
    return windows[0], windows[1], windows[2]
