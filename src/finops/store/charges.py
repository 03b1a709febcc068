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
    # MATERIALIZED: each per-Subscription bound is computed once. Right after a first run the
    # table's statistics still say it is empty, and the planner then nested-looped the inlined
    # window aggregate once per charge row (20 s for 3,750 rows instead of milliseconds).
    # The closed periods' bound only when there is one (an `IS NULL OR` in the query would
    # hide the index range from the planner).
    bound = "AND hour >= %(since)s - interval '1 hour'" if since is not None else ""
    rows = conn.execute(
        f"""
        WITH open AS MATERIALIZED (
            SELECT subscription_uid, min(hour) AS first_open FROM subscription_charges
            WHERE cluster = %(cluster)s AND subscription_uid = ANY(%(uids)b) AND NOT finalized
            GROUP BY subscription_uid
        ), fee AS (
            SELECT subscription_uid, hour,
                   lead(hour) OVER (PARTITION BY subscription_uid ORDER BY hour) AS next_hour
            FROM subscription_charges
            WHERE cluster = %(cluster)s AND subscription_uid = ANY(%(uids)b)
              AND source = 'subscription' {bound}
        ), hole AS MATERIALIZED (
            SELECT subscription_uid, min(hour) AS before_hole FROM fee
            WHERE next_hour > hour + interval '1 hour'
            GROUP BY subscription_uid
        )
        SELECT c.subscription_uid, max(c.hour) FROM subscription_charges c
        LEFT JOIN open o USING (subscription_uid)
        LEFT JOIN hole h USING (subscription_uid)
        WHERE c.cluster = %(cluster)s AND c.subscription_uid = ANY(%(uids)b) AND c.finalized
          AND c.hour < coalesce(o.first_open, 'infinity')
          AND c.hour <= coalesce(h.before_hole, 'infinity')
        GROUP BY c.subscription_uid
        """.encode(),
        {"cluster": cluster, "uids": list(subscription_uids), "since": since},
    ).fetchall()
    return {str(uid): hour.astimezone(dt.UTC) for uid, hour in rows}


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
