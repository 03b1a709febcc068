"""Which statements a billing period has, and their totals, read from the ledger.

A statement's rows are read like a FOCUS export of its period (`finops.store.focus`); this
module answers the questions a list of statements asks without reading every row: which
namespaces were charged in a period (one probe of the `(version, hour)` index per version)
and what each was charged per currency. Reads only.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import psycopg

from finops.billing import periods, statements, ticks
from finops.store import focus

_NAMESPACES = """
    SELECT v.namespace FROM subscription_versions v
    WHERE v.cluster = %(cluster)s AND EXISTS (
        SELECT 1 FROM subscription_charges c
        WHERE c.subscription_version_id = v.id AND c.hour >= %(start)s AND c.hour < %(end)s
          AND c.cluster = %(cluster)s AND c.amount_micros <> 0)
    UNION
    SELECT v.namespace FROM charge_corrections k
    JOIN subscription_versions v ON v.id = k.subscription_version_id
    WHERE k.cluster = %(cluster)s AND k.booked_in >= %(start)s AND k.booked_in < %(end)s
    ORDER BY 1
"""

_TOTALS = """
    SELECT v.namespace, c.currency, sum(c.amount_micros), 0 FROM subscription_charges c
    JOIN subscription_versions v ON v.id = c.subscription_version_id
    WHERE c.cluster = %(cluster)s AND c.hour >= %(start)s AND c.hour < %(end)s AND c.finalized
    GROUP BY 1, 2
    UNION ALL
    SELECT v.namespace, k.currency, 0, sum(k.amount_micros) FROM charge_corrections k
    JOIN subscription_versions v ON v.id = k.subscription_version_id
    WHERE k.cluster = %(cluster)s AND k.booked_in >= %(start)s AND k.booked_in < %(end)s
    GROUP BY 1, 2
"""


def namespaces(
    conn: psycopg.Connection[Any], *, cluster: str, start: dt.datetime, end: dt.datetime
) -> list[str]:
    """Namespaces with a charge in `[start, end)` or a correction booked in the period that
    starts at `start`: the ones the period has a statement for."""
    params = {"cluster": cluster, "start": start, "end": end}
    try:
        rows = conn.execute(_NAMESPACES.encode(), params).fetchall()
    except psycopg.Error as exc:
        raise focus.LedgerReadError(str(exc).strip() or type(exc).__name__) from None
    return [str(r[0]) for r in rows]


def totals(
    conn: psycopg.Connection[Any], *, cluster: str, start: dt.datetime, end: dt.datetime
) -> dict[str, dict[str, tuple[int, int]]]:
    """Per namespace and currency: (settled charges, corrections) in micros."""
    params = {"cluster": cluster, "start": start, "end": end}
    out: dict[str, dict[str, tuple[int, int]]] = {}
    try:
        rows = conn.execute(_TOTALS.encode(), params).fetchall()
    except psycopg.Error as exc:
        raise focus.LedgerReadError(str(exc).strip() or type(exc).__name__) from None
    for ns, currency, charged, corrected in rows:
        mine = out.setdefault(str(ns), {})
        before = mine.get(str(currency), (0, 0))
        mine[str(currency)] = (before[0] + int(charged), before[1] + int(corrected))
    return out


class PeriodNotFound(LookupError):
    """No such billing period, or one not closed when only closed ones were asked for; the
    message says which and what there is."""


def find_period(
    index: periods.PeriodIndex, label: str, *, provisional: bool = False
) -> periods.Period:
    """The period named `YYYY-MM`: a closed one, or (with `provisional`) the open one of
    that month."""
    for period in index.closed:
        if period.label == label:
            return period
    match = re.fullmatch(r"([0-9]{4})-([0-9]{2})", label)
    if match is None or not 1 <= int(match.group(2)) <= 12:
        raise PeriodNotFound(f"{label!r} is not a billing period name such as 2026-04")
    zone = index.calendar.zone
    start = dt.datetime(int(match.group(1)), int(match.group(2)), 1, tzinfo=zone)
    period = index.period_of(start.astimezone(dt.UTC))
    through = index.closed_through
    closed = "none closed yet" if through is None else f"closed through {ticks.rfc3339(through)}"
    if period.label != label or index.is_closed(period):
        raise PeriodNotFound(f"no billing period {label} ({closed})")
    if not provisional:
        raise PeriodNotFound(f"billing period {label} is not closed yet ({closed})")
    return period


def statement(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    namespace: str,
    label: str,
    provisional: bool = False,
) -> statements.Statement:
    """The statement of `namespace` for the period named `label` (raises `PeriodNotFound`;
    `focus.LedgerReadError` for a database failure). Reads in the caller's transaction."""
    index = focus.period_index(conn, cluster=cluster)
    period = find_period(index, label, provisional=provisional)
    rows = focus.charges(
        conn, cluster=cluster, start=period.start, end=period.end, namespace=namespace
    )
    return statements.build(
        cluster=cluster, namespace=namespace, period=period, index=index, charges=rows
    )
