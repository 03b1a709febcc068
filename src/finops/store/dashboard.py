"""Read-only queries behind the gateway's cost dashboard: series, breakdowns, the currency.

Why separate from `reads`: the dashboard reads across every namespace a caller may see at
once, bucketed by hour or UTC day, so one request is one query however many namespaces it
spans. Charges belong to the namespace and name their pricing Subscription version had;
windows are half-open [start, end) and money stays integer micros.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Collection
from typing import Any

import psycopg
from psycopg import sql

from finops.billing import ticks
from finops.store import spans


class Step(enum.StrEnum):
    """How wide one bucket of a series is (UTC)."""

    HOUR = "hour"
    DAY = "day"


class GroupBy(enum.StrEnum):
    """What one series of a stacked chart is: a charge source or a Subscription."""

    SOURCE = "source"
    SUBSCRIPTION = "subscription"


@dataclasses.dataclass(frozen=True)
class SeriesPoint:
    """Micros charged in one bucket to one series key, in one currency."""

    bucket: dt.datetime
    key: str
    currency: str
    amount_micros: int


@dataclasses.dataclass(frozen=True)
class BreakdownRow:
    """Micros one Subscription was charged for one source, with the Offering that priced it."""

    namespace: str
    subscription: str
    offering_namespace: str
    offering: str
    source: str
    currency: str
    total_micros: int
    finalized_micros: int


def charged_namespaces(conn: psycopg.Connection[Any], *, cluster: str) -> list[str]:
    """Every namespace a mirrored Subscription version has lived in, sorted."""
    rows = conn.execute(
        "SELECT DISTINCT namespace FROM subscription_versions WHERE cluster = %s ORDER BY 1",
        (cluster,),
    ).fetchall()
    return [str(ns) for (ns,) in rows]


_NAMESPACES = """
    WITH v AS MATERIALIZED (
        SELECT id, namespace, name FROM subscription_versions
        WHERE cluster = %(cluster)s AND namespace = ANY(%(namespaces)s)
    )
"""
_EDGE_HOURS = """
    FROM subscription_charges c JOIN v ON v.id = c.subscription_version_id
    WHERE c.cluster = %(cluster)s
      AND ((c.hour >= %(start)s AND c.hour < %(day_lo)s)
           OR (c.hour >= %(day_hi)s AND c.hour < %(end)s))
"""
# By day and source: the namespaces' daily sums, and the hours around the whole days.
_SOURCE_SERIES = f"""
    {_NAMESPACES}
    SELECT bucket, source, currency, sum(amount) FROM (
        SELECT c.day AS bucket, c.source, c.currency, c.amount_micros AS amount
        FROM charge_namespace_days c
        JOIN (SELECT DISTINCT unnest(%(namespaces)s::text[]) AS namespace) n USING (namespace)
        WHERE c.cluster = %(cluster)s AND c.day >= %(day_lo)s AND c.day < %(day_hi)s
        UNION ALL
        SELECT date_trunc('day', c.hour, 'UTC'), c.source, c.currency, c.amount_micros
        {_EDGE_HOURS}
    ) u
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3
"""
# By day and Subscription: the versions' daily sums, and the hours around the whole days.
_SUBSCRIPTION_SERIES = f"""
    {_NAMESPACES}
    SELECT bucket, key, currency, sum(amount) FROM (
        SELECT c.day AS bucket, v.namespace || '/' || v.name AS key, c.currency,
               c.amount_micros AS amount
        FROM charge_days c JOIN v ON v.id = c.subscription_version_id
        WHERE c.cluster = %(cluster)s AND c.day >= %(day_lo)s AND c.day < %(day_hi)s
        UNION ALL
        SELECT date_trunc('day', c.hour, 'UTC'), v.namespace || '/' || v.name, c.currency,
               c.amount_micros
        {_EDGE_HOURS}
    ) u
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3
"""
# Per Subscription and source: the monthly sums of the whole months, the daily sums of the
# whole days around them, the hours around those; summed by version ids (integers) first.
_BREAKDOWN = f"""
    {_NAMESPACES}
    SELECT v.namespace, v.name, o.namespace, o.name, r.source, r.currency, sum(r.amount),
           sum(r.final)
    FROM (
        SELECT sv, ov, source, currency, sum(amount) AS amount, sum(final) AS final FROM (
            SELECT c.subscription_version_id AS sv, c.offering_version_id AS ov, c.source,
                   c.currency, c.amount_micros AS amount, c.finalized_micros AS final
            FROM charge_months c
            WHERE c.cluster = %(cluster)s AND c.month >= %(month_lo)s AND c.month < %(month_hi)s
              AND c.subscription_version_id IN (SELECT id FROM v)
            UNION ALL
            SELECT c.subscription_version_id, c.offering_version_id, c.source, c.currency,
                   c.amount_micros, c.finalized_micros
            FROM charge_days c
            WHERE c.cluster = %(cluster)s AND c.subscription_version_id IN (SELECT id FROM v)
              AND ((c.day >= %(day_lo)s AND c.day < %(month_lo)s)
                   OR (c.day >= %(month_hi)s AND c.day < %(day_hi)s))
            UNION ALL
            SELECT c.subscription_version_id, c.offering_version_id, c.source, c.currency,
                   c.amount_micros, CASE WHEN c.finalized THEN c.amount_micros ELSE 0 END
            {_EDGE_HOURS}
        ) u
        GROUP BY 1, 2, 3, 4
    ) r
    JOIN v ON v.id = r.sv
    JOIN offering_versions o ON o.id = r.ov
    GROUP BY 1, 2, 3, 4, 5, 6
    ORDER BY 1, 2, 3, 4, 5, 6
"""
_HOURLY_SERIES = """
    SELECT c.hour AS bucket, {key} AS key, c.currency, sum(c.amount_micros)
    FROM subscription_charges c
    JOIN subscription_versions v ON v.id = c.subscription_version_id
    WHERE c.cluster = %(cluster)s AND v.cluster = %(cluster)s
      AND v.namespace = ANY(%(namespaces)s)
      AND c.hour >= %(start)s AND c.hour < %(end)s
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3
"""

_SERIES_KEYS = {
    GroupBy.SOURCE: sql.SQL("c.source"),
    GroupBy.SUBSCRIPTION: sql.SQL("v.namespace || '/' || v.name"),
}


def cost_series(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    namespaces: Collection[str],
    start: dt.datetime,
    end: dt.datetime,
    step: Step,
    group_by: GroupBy,
) -> list[SeriesPoint]:
    """Sums per UTC bucket, series key and currency over charges in [start, end), in order.

    Only non-empty buckets come back; the caller lays them on its own time axis.
    """
    ticks.require_aware(start=start, end=end)
    if not namespaces:
        return []
    query: sql.Composable
    if step is Step.DAY:
        daily = _SOURCE_SERIES if group_by is GroupBy.SOURCE else _SUBSCRIPTION_SERIES
        query = sql.SQL(daily)
    else:
        query = sql.SQL(_HOURLY_SERIES).format(key=_SERIES_KEYS[group_by])
    rows = conn.execute(
        query, spans.params(cluster, start, end, namespaces=list(namespaces))
    ).fetchall()
    return [
        SeriesPoint(
            bucket=bucket.astimezone(dt.UTC),
            key=str(series),
            currency=str(currency),
            amount_micros=int(amount),
        )
        for bucket, series, currency, amount in rows
    ]


def cost_breakdown(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    namespaces: Collection[str],
    start: dt.datetime,
    end: dt.datetime,
) -> list[BreakdownRow]:
    """Per namespace, Subscription, Offering, source and currency: micros over [start, end)."""
    ticks.require_aware(start=start, end=end)
    if not namespaces:
        return []
    rows = conn.execute(
        _BREAKDOWN, spans.params(cluster, start, end, namespaces=list(namespaces))
    ).fetchall()
    return [
        BreakdownRow(
            namespace=str(ns),
            subscription=str(name),
            offering_namespace=str(off_ns),
            offering=str(off_name),
            source=str(source),
            currency=str(currency),
            total_micros=int(total),
            finalized_micros=int(finalized),
        )
        for ns, name, off_ns, off_name, source, currency, total, finalized in rows
    ]


def active_currency(conn: psycopg.Connection[Any], *, cluster: str) -> str | None:
    """The currency of the PriceBook that priced the latest collected hour.

    Why the ledger and not the API: the gateway needs no read access to PriceBooks. Before
    any allocation is collected, the most recently recorded book's currency stands in.
    """
    row = conn.execute(
        """
        SELECT currency FROM provider_allocations WHERE cluster = %s
        ORDER BY hour DESC LIMIT 1
        """,
        (cluster,),
    ).fetchone()
    if row is None:
        row = conn.execute(
            "SELECT currency FROM pricebooks WHERE cluster = %s ORDER BY id DESC LIMIT 1",
            (cluster,),
        ).fetchone()
    return None if row is None else str(row[0])
