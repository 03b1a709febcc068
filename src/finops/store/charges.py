"""`subscription_charges`: hourly charge rows, the watermark, and the sums `status.costs` reads.

A charge row is keyed on (cluster, subscription UID, hour, source), so a replayed run
upserts the same rows. A finalized row is billed history and no later upsert changes it; a
non-finalized row (the hour in progress, or usage whose allocations had not settled) is
rewritten and may be promoted to finalized. Functions run in the caller's transaction.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import psycopg

from finops.collection import charge_plan

SOURCES = ("subscription", "cpuHour", "gpuHour", "ramGbHour", "pvGbHour", "networkGb")
"""Charge sources: the recurring fee, then the five usage meters (same names as the API)."""

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
_TYPES = (
    "text",
    "text",
    "timestamptz",
    "text",
    "numeric",
    "bigint",
    "bigint",
    "text",
    "boolean",
    "bigint",
    "bigint",
    "bigint",
    "timestamptz",
    "timestamptz",
)
_KEY = ("cluster", "subscription_uid", "hour", "source")
UPDATED = tuple(c for c in COLUMNS if c not in _KEY)
"""The columns a replayed charge row may change (everything but its idempotency key)."""


Charge = charge_plan.ChargeRow
"""One row of `subscription_charges` (defined with the pure charge plan that assembles it)."""


def upsert(conn: psycopg.Connection[Any], charges: Iterable[Charge]) -> int:
    """Write charge rows in one statement; return how many rows were inserted or changed.

    Rows sharing a key within the batch collapse to the last one. Finalized rows in the
    table are never changed; identical rows are not rewritten.
    """
    batch: dict[tuple[str, str, dt.datetime, str], Charge] = {}
    for charge in charges:
        if charge.hour.tzinfo is None or charge.hour.utcoffset() is None:
            raise ValueError(f"Charge.hour must be timezone-aware, got {charge.hour!r}")
        if charge.source not in SOURCES:
            raise ValueError(f"unknown charge source {charge.source!r}")
        key = (
            charge.cluster,
            charge.subscription_uid,
            charge.hour.astimezone(dt.UTC),
            charge.source,
        )
        batch[key] = charge
    if not batch:
        return 0
    # Key order: concurrent writers lock conflicting rows in the same order (no deadlock).
    ordered = [batch[k] for k in sorted(batch)]
    arrays = [[getattr(c, name) for c in ordered] for name in COLUMNS]
    unnest = ", ".join(f"%s::{t}[]" for t in _TYPES)
    assignments = ", ".join(f"{c} = EXCLUDED.{c}" for c in UPDATED)
    mine = ", ".join(f"subscription_charges.{c}" for c in UPDATED)
    theirs = ", ".join(f"EXCLUDED.{c}" for c in UPDATED)
    cur = conn.execute(
        f"""
        INSERT INTO subscription_charges ({", ".join(COLUMNS)})
        SELECT * FROM unnest({unnest})
        ON CONFLICT ({", ".join(_KEY)}) DO UPDATE SET {assignments}
        WHERE NOT subscription_charges.finalized
          AND ({mine}) IS DISTINCT FROM ({theirs})
        """.encode(),
        arrays,
    )
    return cur.rowcount


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


def watermark(
    conn: psycopg.Connection[Any], *, cluster: str, subscription_uid: str
) -> dt.datetime | None:
    """`watermarks` for one Subscription; None when nothing is finalized yet."""
    return watermarks(conn, cluster=cluster, subscription_uids=[subscription_uid]).get(
        subscription_uid
    )


def sums(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    subscription_uids: Collection[str],
    start: dt.datetime,
    end: dt.datetime,
) -> dict[str, dict[str, int]]:
    """Micros charged per Subscription and source over hours in [start, end).

    Finalized and in-progress rows both count. Sources with no rows are absent, as are
    Subscriptions with none. The charge run reads its buckets' `current` through
    `window_sums`, several windows in one query; this one-window form is what tests hold
    it to.
    """
    for value, what in ((start, "start"), (end, "end")):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{what} must be timezone-aware, got {value!r}")
    rows = conn.execute(
        """
        SELECT subscription_uid, source, sum(amount_micros) FROM subscription_charges
        WHERE cluster = %s AND subscription_uid = ANY(%b) AND hour >= %s AND hour < %s
        GROUP BY subscription_uid, source
        """,
        (cluster, list(subscription_uids), start, end),
    ).fetchall()
    result: dict[str, dict[str, int]] = {}
    for uid, source, total in rows:
        result.setdefault(str(uid), {})[str(source)] = int(total)
    return result


def window_sums(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    subscription_uids: Collection[str],
    windows: Sequence[tuple[dt.datetime, dt.datetime]],
) -> list[dict[str, dict[str, int]]]:
    """`sums` for each of several windows, in one query: the read-back of a charge
    run (three windows) scans the Subscriptions' rows once instead of once per window. An
    empty window (start >= end) sums to {}."""
    for start, end in windows:
        for value, what in ((start, "start"), (end, "end")):
            if value.tzinfo is None or value.utcoffset() is None:
                raise ValueError(f"{what} must be timezone-aware, got {value!r}")
    spans = [(s, e) for s, e in windows if s < e]
    result: list[dict[str, dict[str, int]]] = [{} for _ in windows]
    if not spans:
        return result
    filters = ", ".join(
        f"sum(amount_micros) FILTER (WHERE hour >= %(s{i})s AND hour < %(e{i})s)"
        for i in range(len(spans))
    )
    params: dict[str, Any] = {"cluster": cluster, "uids": list(subscription_uids)}
    for i, (s, e) in enumerate(spans):
        params[f"s{i}"], params[f"e{i}"] = s, e
    bounds = " OR ".join(f"(hour >= %(s{i})s AND hour < %(e{i})s)" for i in range(len(spans)))
    rows = conn.execute(
        f"""
        SELECT subscription_uid, source, {filters} FROM subscription_charges
        WHERE cluster = %(cluster)s AND subscription_uid = ANY(%(uids)b)
          AND hour >= %(lo)s AND hour < %(hi)s AND ({bounds})
        GROUP BY subscription_uid, source
        """.encode(),
        {**params, "lo": min(s for s, _ in spans), "hi": max(e for _, e in spans)},
    ).fetchall()
    where = [i for i, (s, e) in enumerate(windows) if s < e]
    for uid, source, *totals in rows:
        for i, total in zip(where, totals, strict=True):
            if total is not None:
                result[i].setdefault(str(uid), {})[str(source)] = int(total)
    return result


def month_to_day_sums(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    subscription_uids: Collection[str],
    month: dt.datetime,
    day: dt.datetime,
) -> dict[str, dict[str, int]]:
    """`sums` over `[month, day)`, where `month` starts a UTC month and `day` is a UTC day of
    it: the month's sums (`charge_months`, kept by the ledger's triggers) less the rows from
    `day` to the month's end. Why: the charge run reads this every hour, and from the rows
    alone it costs every hour of the month so far; this way it costs the rows of one day."""
    next_month = (month + dt.timedelta(days=32)).replace(day=1)
    rows = conn.execute(
        b"""
        SELECT uid, source, sum(amount) FROM (
            SELECT v.uid, m.source, m.amount_micros AS amount
            FROM charge_months m JOIN subscription_versions v ON v.id = m.subscription_version_id
            WHERE m.cluster = %(cluster)s AND m.month = %(month)s AND v.cluster = %(cluster)s
              AND v.uid = ANY(%(uids)b)
            UNION ALL
            SELECT subscription_uid, source, -amount_micros FROM subscription_charges
            WHERE cluster = %(cluster)s AND subscription_uid = ANY(%(uids)b)
              AND hour >= %(day)s AND hour < %(next)s
        ) r
        GROUP BY 1, 2
        """,
        {
            "cluster": cluster,
            "uids": list(subscription_uids),
            "month": month,
            "day": day,
            "next": next_month,
        },
    ).fetchall()
    result: dict[str, dict[str, int]] = {}
    for uid, source, total in rows:
        if total:
            result.setdefault(str(uid), {})[str(source)] = int(total)
    return result


def sums_by_tenant(
    conn: psycopg.Connection[Any], *, cluster: str, start: dt.datetime, end: dt.datetime
) -> dict[str | None, dict[str, int]]:
    """Micros per `stakater.com/tenant` label and source over hours in [start, end).

    Each charge counts under the tenant its Subscription's namespace carried in the version
    that priced it; None collects charges from unlabelled namespaces.
    """
    rows = conn.execute(
        """
        SELECT v.namespace_labels ->> 'stakater.com/tenant', c.source, sum(c.amount_micros)
        FROM subscription_charges c
        JOIN subscription_versions v ON v.id = c.subscription_version_id
        WHERE c.cluster = %s AND c.hour >= %s AND c.hour < %s
        GROUP BY 1, 2
        """,
        (cluster, start, end),
    ).fetchall()
    result: dict[str | None, dict[str, int]] = {}
    for tenant, source, total in rows:
        result.setdefault(tenant, {})[str(source)] = int(total)
    return result


def sums_for_tenant(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    tenant: str,
    start: dt.datetime,
    end: dt.datetime,
) -> dict[str, int]:
    """Micros per source charged to one tenant over [start, end) (uses the tenant index)."""
    rows = conn.execute(
        """
        SELECT c.source, sum(c.amount_micros)
        FROM subscription_versions v
        JOIN subscription_charges c ON c.subscription_version_id = v.id
        WHERE v.namespace_labels ->> 'stakater.com/tenant' = %s
          AND c.cluster = %s AND c.hour >= %s AND c.hour < %s
        GROUP BY c.source
        """,
        (tenant, cluster, start, end),
    ).fetchall()
    return {str(source): int(total) for source, total in rows}
