"""Read-only queries for the FinOps gateway: one Subscription's charge rows, a namespace's sums.

Charges are found through the Subscription version that priced them, so a row belongs to
the namespace and name the Subscription had when it was charged. Hours are half-open
[start, end); money stays integer micros and quantities exact.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal
from typing import Any

import psycopg

from finops.billing import ticks
from finops.store import spans


@dataclasses.dataclass(frozen=True)
class ChargeRow:
    """One hourly charge of a Subscription, as the gateway returns it."""

    subscription_uid: str
    hour: dt.datetime
    source: str
    quantity: Decimal
    unit_price_micros: int
    amount_micros: int
    currency: str
    finalized: bool


@dataclasses.dataclass(frozen=True)
class CostRow:
    """Micros one Subscription was charged for one source and currency over a window."""

    subscription: str
    subscription_uid: str
    source: str
    currency: str
    total_micros: int
    finalized_micros: int


NAMESPACE_COSTS = """
    SELECT v.name, c.subscription_uid, c.source, c.currency, sum(c.amount_micros),
           coalesce(sum(c.amount_micros) FILTER (WHERE c.finalized), 0)
    FROM subscription_charges c
    JOIN subscription_versions v ON v.id = c.subscription_version_id
    WHERE c.cluster = %s AND v.cluster = %s AND v.namespace = %s
      AND c.hour >= %s AND c.hour < %s
    GROUP BY v.name, c.subscription_uid, c.source, c.currency
    ORDER BY v.name, c.subscription_uid, c.source, c.currency
"""
"""A namespace's sums from its hourly rows (parameters: cluster, cluster, namespace, start,
end). A namespace has few versions; each one's hours in the window are one range of migration
0004's covering `(subscription_version_id, hour)` index, so a request costs the rows it sums,
not the ledger's size. Public so the gateway benchmark and tests EXPLAIN the exact statement;
`namespace_costs` reads the hours around the window's whole days this way."""

NAMESPACE_SUMS = """
    WITH v AS MATERIALIZED (
        SELECT id, uid, name FROM subscription_versions
        WHERE cluster = %(cluster)s AND namespace = %(namespace)s
    )
    SELECT name, uid, source, currency, sum(amount), sum(final) FROM (
        SELECT v.name, v.uid, m.source, m.currency, m.amount_micros AS amount,
               m.finalized_micros AS final
        FROM charge_months m JOIN v ON v.id = m.subscription_version_id
        WHERE m.cluster = %(cluster)s AND m.month >= %(month_lo)s AND m.month < %(month_hi)s
        UNION ALL
        SELECT v.name, v.uid, d.source, d.currency, d.amount_micros, d.finalized_micros
        FROM charge_days d JOIN v ON v.id = d.subscription_version_id
        WHERE d.cluster = %(cluster)s
          AND ((d.day >= %(day_lo)s AND d.day < %(month_lo)s)
               OR (d.day >= %(month_hi)s AND d.day < %(day_hi)s))
        UNION ALL
        SELECT v.name, c.subscription_uid, c.source, c.currency, c.amount_micros,
               CASE WHEN c.finalized THEN c.amount_micros ELSE 0 END
        FROM subscription_charges c JOIN v ON v.id = c.subscription_version_id
        WHERE c.cluster = %(cluster)s
          AND ((c.hour >= %(start)s AND c.hour < %(day_lo)s)
               OR (c.hour >= %(day_hi)s AND c.hour < %(end)s))
    ) r
    GROUP BY 1, 2, 3, 4
    ORDER BY 1, 2, 3, 4
"""
"""What `namespace_costs` runs (named parameters from `spans.params`): the namespace's
versions' monthly sums for the window's whole months, their daily sums for the whole days
around those, their hourly rows for the hours around those, so a tenant's month is a few
dozen sums instead of tens of thousands of rows. Public so benchmarks EXPLAIN it."""


def subscription_charges(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    namespace: str,
    name: str,
    start: dt.datetime,
    end: dt.datetime,
) -> list[ChargeRow]:
    """Charge rows of Subscription `namespace/name` over hours in [start, end), in order."""
    ticks.require_aware(start=start, end=end)
    rows = conn.execute(
        """
        SELECT c.subscription_uid, c.hour, c.source, c.quantity, c.unit_price_micros,
               c.amount_micros, c.currency, c.finalized
        FROM subscription_charges c
        JOIN subscription_versions v ON v.id = c.subscription_version_id
        WHERE c.cluster = %s AND v.cluster = %s AND v.namespace = %s AND v.name = %s
          AND c.hour >= %s AND c.hour < %s
        ORDER BY c.hour, c.source, c.subscription_uid
        """,
        (cluster, cluster, namespace, name, start, end),
    ).fetchall()
    return [
        ChargeRow(
            subscription_uid=str(uid),
            hour=hour.astimezone(dt.UTC),
            source=str(source),
            quantity=Decimal(quantity),
            unit_price_micros=int(price),
            amount_micros=int(amount),
            currency=str(currency),
            finalized=bool(finalized),
        )
        for uid, hour, source, quantity, price, amount, currency, finalized in rows
    ]


def namespace_costs(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    namespace: str,
    start: dt.datetime,
    end: dt.datetime,
) -> list[CostRow]:
    """Per Subscription of `namespace`, source and currency: micros over [start, end)."""
    ticks.require_aware(start=start, end=end)
    rows = conn.execute(
        NAMESPACE_SUMS.encode(), spans.params(cluster, start, end, namespace=namespace)
    ).fetchall()
    return [
        CostRow(
            subscription=str(name),
            subscription_uid=str(uid),
            source=str(source),
            currency=str(currency),
            total_micros=int(total),
            finalized_micros=int(finalized),
        )
        for name, uid, source, currency, total, finalized in rows
    ]
