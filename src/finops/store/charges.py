"""`subscription_charges`: hourly charge rows, the watermark, and the sums `status.costs` reads.

A charge row is keyed on (cluster, subscription UID, hour, source), so a replayed run
upserts the same rows. A finalized row is billed history and no later upsert changes it; a
non-finalized row (the hour in progress, or usage whose allocations had not settled) is
rewritten and may be promoted to finalized. Functions run in the caller's transaction.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
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
# rows), its first and last fee hour since the bound (two primary-key probes); then, from the
# monthly sums, the first month whose fee rows in that span fall short of its hours (rows are
# unique per hour, so a full count means no hole; the first month's rows before the span are
# counted by one more probe and taken off). Only from a short month on are the fee rows read,
# for the exact hole; the watermark is then one backward primary-key probe. Exact as
# `tests/oracle/watermarks.py`, the statement it replaces.
_WATERMARKS = """
    WITH u AS (SELECT DISTINCT unnest(%(uids)s::text[]) AS uid),
    open AS MATERIALIZED (
        SELECT subscription_uid AS uid, min(hour) AS first_open FROM subscription_charges
        WHERE cluster = %(cluster)s AND subscription_uid = ANY(%(uids)s) AND NOT finalized
        GROUP BY 1
    ), span AS MATERIALIZED (
        SELECT u.uid, f.lo, l.hi, date_trunc('month', f.lo, 'UTC') AS lo_month, b.before
        FROM u
        CROSS JOIN LATERAL (
            SELECT min(hour) AS lo FROM subscription_charges
            WHERE cluster = %(cluster)s AND subscription_uid = u.uid
              AND source = 'subscription' {bound}) f
        CROSS JOIN LATERAL (
            SELECT max(hour) AS hi FROM subscription_charges
            WHERE cluster = %(cluster)s AND subscription_uid = u.uid
              AND source = 'subscription' {bound}) l
        CROSS JOIN LATERAL (
            SELECT count(*) AS before FROM subscription_charges
            WHERE cluster = %(cluster)s AND subscription_uid = u.uid AND source = 'subscription'
              AND hour >= date_trunc('month', f.lo, 'UTC') AND hour < f.lo) b
        WHERE f.lo IS NOT NULL
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
        CROSS JOIN LATERAL generate_series(s.lo_month, s.hi, interval '1 month') g(month)
        LEFT JOIN counted c ON c.uid = s.uid AND c.month = g.month
        WHERE coalesce(c.n, 0) - CASE WHEN g.month = s.lo_month THEN s.before ELSE 0 END
              < extract(epoch FROM least(g.month + interval '1 month', s.hi + interval '1 hour')
                                   - greatest(g.month, s.lo)) / 3600
        GROUP BY s.uid
    ), fee AS (
        SELECT k.uid, c.hour,
               lead(c.hour) OVER (PARTITION BY k.uid ORDER BY c.hour) AS next_hour
        FROM short k JOIN span s ON s.uid = k.uid
        JOIN subscription_charges c ON c.cluster = %(cluster)s
             AND c.subscription_uid = k.uid AND c.source = 'subscription'
             AND c.hour >= greatest(s.lo, k.month - interval '1 hour')
    ), hole AS MATERIALIZED (
        SELECT uid, min(hour) AS before_hole FROM fee
        WHERE next_hour > hour + interval '1 hour'
        GROUP BY uid
    )
    SELECT u.uid, w.hour FROM u
    LEFT JOIN open o ON o.uid = u.uid
    LEFT JOIN hole h ON h.uid = u.uid
    CROSS JOIN LATERAL (
        SELECT max(c.hour) AS hour FROM subscription_charges c
        WHERE c.cluster = %(cluster)s AND c.subscription_uid = u.uid AND c.finalized
          AND c.hour < coalesce(o.first_open, 'infinity')
          AND c.hour <= coalesce(h.before_hole, 'infinity')
    ) w
    WHERE w.hour IS NOT NULL
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
    rows = conn.execute(
        _WATERMARKS.format(bound=bound).encode(),
        {"cluster": cluster, "uids": list(subscription_uids), "since": since},
    ).fetchall()
    return {str(uid): hour.astimezone(dt.UTC) for uid, hour in rows}


# The month so far and the windows from its day on, in one read of that day's rows: the
# month's sums less those rows, and a FILTER per window over the same rows.
_BUCKET_SUMS = """
    WITH months AS (
        SELECT v.uid, m.source, sum(m.amount_micros) AS amount
        FROM charge_months m JOIN subscription_versions v ON v.id = m.subscription_version_id
        WHERE m.cluster = %(cluster)s AND m.month = %(month)s AND v.cluster = %(cluster)s
          AND v.uid = ANY(%(uids)b)
        GROUP BY 1, 2
    ), later AS (
        SELECT subscription_uid AS uid, source, sum(amount_micros) AS amount{filters}
        FROM subscription_charges
        WHERE cluster = %(cluster)s AND subscription_uid = ANY(%(uids)b)
          AND hour >= %(day)s AND hour < %(next)s
        GROUP BY 1, 2
    )
    SELECT coalesce(m.uid, l.uid), coalesce(m.source, l.source),
           coalesce(m.amount, 0) - coalesce(l.amount, 0){picked}
    FROM months m FULL JOIN later l ON l.uid = m.uid AND l.source = m.source
"""


def _month_end(
    month: dt.datetime, day: dt.datetime, windows: Sequence[tuple[dt.datetime, dt.datetime]]
) -> dt.datetime:
    """The end of `month`, once `day` is known to be in it and every window within `[day,
    month end)`: a window outside would be summed short by `bucket_sums`."""
    next_month = partitions.add_months(month, 1)
    ticks.require_aware(month=month, day=day)
    for lo, hi in windows:
        ticks.require_aware(window=lo)
        ticks.require_aware(window=hi)
    if not month <= day < next_month:
        raise ValueError(f"day {day.isoformat()} is not in the month of {month.isoformat()}")
    for start, end in windows:
        if start < end and (start < day or end > next_month):
            raise ValueError(
                f"window [{start.isoformat()}, {end.isoformat()}) is not within"
                f" [{day.isoformat()}, {next_month.isoformat()})"
            )
    return next_month


def bucket_sums(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    subscription_uids: Collection[str],
    month: dt.datetime,
    day: dt.datetime,
    windows: Sequence[tuple[dt.datetime, dt.datetime]],
) -> list[dict[str, dict[str, int]]]:
    """`sums` over `[month, day)`, then over each window, in one query: what a charge run
    reads back for the buckets every hour.

    `month` starts a UTC month, `day` is a UTC day of it, and every window lies in `[day,
    next month)`. The first sum is the month's sums (`charge_months`, kept by the ledger's
    triggers) less the month's rows from `day` on, so it costs the rows of one day, not every
    hour of the month so far; those same rows, read once, give each window's sums. A sum over
    `[month, day)` that comes to zero is left out; a window's is kept when the window holds
    rows. An empty window (start >= end) sums to {}."""
    next_month = _month_end(month, day, windows)
    spans = [(s, e) for s, e in windows if s < e]
    params: dict[str, Any] = {
        "cluster": cluster,
        "uids": list(subscription_uids),
        "month": month,
        "day": day,
        "next": next_month,
    }
    for i, (s, e) in enumerate(spans):
        params[f"s{i}"], params[f"e{i}"] = s, e
    statement = _BUCKET_SUMS.format(
        filters="".join(
            f", sum(amount_micros) FILTER (WHERE hour >= %(s{i})s AND hour < %(e{i})s) AS w{i}"
            for i in range(len(spans))
        ),
        picked="".join(f", l.w{i}" for i in range(len(spans))),
    )
    rows = conn.execute(statement.encode(), params).fetchall()
    so_far: dict[str, dict[str, int]] = {}
    result: list[dict[str, dict[str, int]]] = [{} for _ in windows]
    where = [i for i, (s, e) in enumerate(windows) if s < e]
    for uid, source, before, *totals in rows:
        if before:
            so_far.setdefault(str(uid), {})[str(source)] = int(before)
        for i, total in zip(where, totals, strict=True):
            if total is not None:
                result[i].setdefault(str(uid), {})[str(source)] = int(total)
    return [so_far, *result]
