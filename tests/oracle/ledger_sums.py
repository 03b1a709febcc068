"""Exact reference sums straight from the hourly charge rows (no daily sums, no shortcuts).

The daily sums (`charge_days`) and the dashboard's reads over them are held to these.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any

import psycopg

_BY_VERSION = """
    SELECT cluster, date_trunc('{unit}', hour, 'UTC'), subscription_version_id,
           offering_version_id, source, currency, sum(amount_micros)::bigint,
           coalesce(sum(amount_micros) FILTER (WHERE finalized), 0)::bigint, count(*)
    FROM subscription_charges
    GROUP BY 1, 2, 3, 4, 5, 6
    ORDER BY 1, 2, 3, 4, 5, 6
"""
DAYS = _BY_VERSION.format(unit="day")
MONTHS = _BY_VERSION.format(unit="month")

NAMESPACE_DAYS = """
    SELECT c.cluster, date_trunc('day', c.hour, 'UTC'), v.namespace, c.source, c.currency,
           sum(c.amount_micros)::bigint,
           coalesce(sum(c.amount_micros) FILTER (WHERE c.finalized), 0)::bigint, count(*)
    FROM subscription_charges c JOIN subscription_versions v ON v.id = c.subscription_version_id
    GROUP BY 1, 2, 3, 4, 5
    ORDER BY 1, 2, 3, 4, 5
"""

KEPT = """
    SELECT cluster, day, subscription_version_id, offering_version_id, source, currency,
           amount_micros, finalized_micros, charge_rows
    FROM charge_days ORDER BY 1, 2, 3, 4, 5, 6
"""


def day_sums(conn: psycopg.Connection[Any]) -> list[list[tuple[Any, ...]]]:
    """The rows summed per (cluster, UTC day, versions, source, currency), per UTC month
    instead of day, and per (cluster, UTC day, namespace, source, currency)."""
    return [conn.execute(q).fetchall() for q in (DAYS, MONTHS, NAMESPACE_DAYS)]


def kept_day_sums(conn: psycopg.Connection[Any]) -> list[list[tuple[Any, ...]]]:
    """What `charge_days`, `charge_months` and `charge_namespace_days` hold, in the same
    shapes."""
    return [
        conn.execute(q).fetchall()
        for q in (
            KEPT,
            KEPT.replace("day,", "month,").replace("charge_days", "charge_months"),
            "SELECT * FROM charge_namespace_days ORDER BY 1, 2, 3, 4, 5",
        )
    ]


def daily_series(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    namespaces: Collection[str],
    start: dt.datetime,
    end: dt.datetime,
    by_subscription: bool,
) -> list[tuple[dt.datetime, str, str, int]]:
    """(UTC day, key, currency, micros) of the namespaces' rows in [start, end), in order."""
    key = "v.namespace || '/' || v.name" if by_subscription else "c.source"
    rows = conn.execute(
        f"""
        SELECT date_trunc('day', c.hour, 'UTC'), {key}, c.currency, sum(c.amount_micros)
        FROM subscription_charges c
        JOIN subscription_versions v ON v.id = c.subscription_version_id
        WHERE c.cluster = %s AND v.namespace = ANY(%s) AND c.hour >= %s AND c.hour < %s
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        """.encode(),
        (cluster, list(namespaces), start, end),
    ).fetchall()
    return [(b.astimezone(dt.UTC), str(k), str(c), int(a)) for b, k, c, a in rows]


def breakdown(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    namespaces: Collection[str],
    start: dt.datetime,
    end: dt.datetime,
) -> list[tuple[str, str, str, str, str, str, int, int]]:
    """Per namespace, Subscription, Offering, source and currency: (total, finalized)."""
    rows = conn.execute(
        """
        SELECT v.namespace, v.name, o.namespace, o.name, c.source, c.currency,
               sum(c.amount_micros), coalesce(sum(c.amount_micros) FILTER (WHERE c.finalized), 0)
        FROM subscription_charges c
        JOIN subscription_versions v ON v.id = c.subscription_version_id
        JOIN offering_versions o ON o.id = c.offering_version_id
        WHERE c.cluster = %s AND v.namespace = ANY(%s) AND c.hour >= %s AND c.hour < %s
        GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6
        """,
        (cluster, list(namespaces), start, end),
    ).fetchall()
    return [
        (str(a), str(b), str(c), str(d), str(e), str(f), int(t), int(z))
        for a, b, c, d, e, f, t, z in rows
    ]
