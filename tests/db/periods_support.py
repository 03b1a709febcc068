"""Shared pieces of the billing-period db tests: Subscriptions as the charge run sees them,
allocation rows written as the allocation job would, and the ledger read back per hour."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import psycopg

from finops.billing import periods
from finops.collection import charge_plan, charges
from finops.jobs import charges as job
from finops.store import allocations
from tests.oracle import charge_rows

HOUR = dt.timedelta(hours=1)
MARCH_END = dt.datetime(2026, 4, 1, tzinfo=dt.UTC)
"""The tests' first period boundary: March closes, April is the first open period."""
CALENDAR = periods.Calendar("UTC", dt.timedelta(hours=2))
BOOKS = (
    ("EUR", {"cpuHour": 29_000, "ramGbHour": 3_000, "networkGiB": 12_345}),
    ("USD", {"cpuHour": 31_000, "ramGbHour": 4_000, "pvGbHour": 77, "networkGiB": 90_000}),
)
"""Two PriceBooks; USD is written last, so fees price in USD."""
FEES = {
    "hourly": {"priceMicros": 2_500_000, "tickAlignment": "HourBoundary", "period": "1"},
    "daily": {"priceMicros": 12_000_000, "tickAlignment": "DayBoundary", "period": "1"},
    "monthly": {"priceMicros": 300_000_000, "tickAlignment": "MonthBoundary", "period": "1"},
    "90m": {"priceMicros": 1_000_000, "tickAlignment": "ActivatedAt", "period": "90m"},
    "6-hourly": {"priceMicros": 7_000_000, "tickAlignment": "HourBoundary", "period": "6"},
    "weekly": {"priceMicros": 50_000_000, "tickAlignment": "DayBoundary", "period": "7"},
}


def books(conn: psycopg.Connection[Any], cluster: str) -> list[int]:
    """The two PriceBook rows of `cluster` (EUR, then USD)."""
    return [
        allocations.ensure_pricebook(
            conn,
            cluster=cluster,
            namespace="p",
            name=f"book-{currency.lower()}",
            uid=f"book-{currency.lower()}",
            currency=currency,
            rates=rates,
        )
        for currency, rates in BOOKS
    ]


def subscription(
    uid: str,
    *,
    activated: dt.datetime,
    deactivated: dt.datetime | None = None,
    fee: str | None = "hourly",
    meters: tuple[str, ...] = ("cpuHour", "ramGbHour"),
    namespace: str = "ns-a",
    tenant_namespace: str = "team-a",
    margins: dict[str, dict[str, int]] | None = None,
) -> charge_plan.Billed:
    """One activated Subscription and its Offering, as the charge run reads them."""
    margin = margins or {}
    pricing: dict[str, Any] = {
        "resourcePricing": [{"name": m, "margins": margin.get(m, {})} for m in meters]
    }
    if fee is not None:
        pricing["subscriptionFee"] = FEES[fee]
    offering: Any = {
        "metadata": {
            "uid": f"off-{uid}",
            "namespace": "o",
            "name": f"offer-{uid}",
            "generation": 1,
        },
        "spec": {"pricing": pricing},
    }
    obj = {
        "metadata": {
            "uid": uid,
            "namespace": tenant_namespace,
            "name": f"sub-{uid}",
            "generation": 1,
            "resourceVersion": "1",
        },
        "spec": {
            "offeringRef": {"name": f"offer-{uid}", "namespace": "o"},
            "usageSources": [{"namespace": namespace}],
        },
        "status": {
            "activatedAt": activated.isoformat(),
            "deactivatedAt": None if deactivated is None else deactivated.isoformat(),
        },
    }
    state = charges.SubscriptionState.from_object(obj)
    return charge_plan.Billed(state, charges.terms_for(state, offering["spec"]), offering, {})


def allocation(
    conn: psycopg.Connection[Any],
    cluster: str,
    *,
    hour: dt.datetime,
    name: str,
    book: int,
    currency: str,
    cpu: str = "0.5",
    namespace: str = "ns-a",
    final: bool = True,
    pv: str = "0",
    moved: str = "0",
) -> None:
    """One allocation row (the whole hour: CPU, RAM, volume and network use), inserted or
    replaced."""
    conn.execute(
        """
        INSERT INTO provider_allocations (cluster, hour, namespace, name, aggregation,
            start_time, end_time, cpu_core_usage_average, ram_byte_usage_average,
            pv_byte_hours, network_transfer_bytes, pricebook_id, currency, is_finalized)
        VALUES (%s, %s, %s, %s, 'namespace,pod', %s, %s, %s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (cluster, hour, namespace, name, aggregation) DO UPDATE SET
            cpu_core_usage_average = EXCLUDED.cpu_core_usage_average,
            pricebook_id = EXCLUDED.pricebook_id, currency = EXCLUDED.currency,
            is_finalized = EXCLUDED.is_finalized
        """,
        (
            cluster,
            hour,
            namespace,
            name,
            hour,
            hour + HOUR,
            Decimal(cpu),
            Decimal(536870912),
            Decimal(pv),
            Decimal(moved),
            book,
            currency,
            final,
        ),
    )


def reprice(
    conn: psycopg.Connection[Any], cluster: str, hour: dt.datetime, book: int, currency: str
) -> None:
    """Every allocation row of `hour` stamped with another PriceBook (as a re-collection under
    a newly active book would leave them)."""
    conn.execute(
        "UPDATE provider_allocations SET pricebook_id = %s, currency = %s"
        " WHERE cluster = %s AND hour = %s",
        (book, currency, cluster, hour),
    )


def run(
    conn: psycopg.Connection[Any],
    cluster: str,
    scheduled: dt.datetime,
    billed: list[charge_plan.Billed],
) -> job.LedgerResult:
    """One charge run's ledger pass (autocommit `conn`)."""
    return job.charge(conn, cluster=cluster, scheduled=scheduled, billed=billed, calendar=CALENDAR)


Key = tuple[str, dt.datetime, str, str]


def ledger_by_hour(
    conn: psycopg.Connection[Any], cluster: str, before: dt.datetime
) -> dict[Key, tuple[Decimal, int]]:
    """Charge rows plus corrections per (Subscription, hour, source, currency) before
    `before`: (quantity, micros), zero sums left out."""
    rows = conn.execute(
        """
        SELECT subscription_uid, hour, source, currency, sum(quantity), sum(amount_micros)
        FROM (SELECT subscription_uid, hour, source, currency, quantity, amount_micros
              FROM subscription_charges WHERE cluster = %(c)s AND hour < %(b)s
              UNION ALL
              SELECT subscription_uid, hour, source, currency, quantity, amount_micros
              FROM charge_corrections WHERE cluster = %(c)s AND hour < %(b)s) t
        GROUP BY 1, 2, 3, 4
        """,
        {"c": cluster, "b": before},
    ).fetchall()
    return {
        (str(u), h.astimezone(dt.UTC), str(s), str(c)): (Decimal(q), int(a))
        for u, h, s, c, q, a in rows
        if q != 0 or a != 0
    }


def oracle_by_hour(rows: list[charge_rows.ChargeRow]) -> dict[Key, tuple[Decimal, int]]:
    """The oracle's rows in the same shape (zero rows left out)."""
    out: dict[Key, tuple[Decimal, int]] = {}
    for r in rows:
        if r.quantity == 0 and r.amount_micros == 0:
            continue
        out[(r.subscription_uid, r.hour, r.source, r.currency)] = (r.quantity, r.amount_micros)
    return out


GENERATED_END = MARCH_END + 6 * HOUR
"""The generated ledger's last charge run (April stays open)."""


def generated_ledger(conn: psycopg.Connection[Any], cluster: str) -> list[charge_plan.Billed]:
    """A ledger with every fee alignment (prorated opening ticks included), usage meters with
    both margins, deactivations, usage in two currencies, a closed March and corrections of
    it booked in April (a late allocation, a re-priced hour, a back-dated deactivation, a
    Subscription first charged after the close)."""
    eur, usd = books(conn, cluster)
    start = MARCH_END - 10 * HOUR
    meters = ("cpuHour", "ramGbHour", "pvGbHour", "networkGb")
    margins = {"cpuHour": {"factorMilli": 1200}, "ramGbHour": {"absoluteMicros": 500}}
    minute = dt.timedelta(minutes=1)
    subs = [
        subscription(
            f"g-{fee}",
            activated=start + (7 + i) * minute,
            fee=fee,
            meters=meters,
            margins=margins,
            namespace="ns-a" if i % 2 else "ns-b",
            tenant_namespace="team-a" if i % 3 else "team-b",
        )
        for i, fee in enumerate(FEES)
    ]
    gone = subscription(
        "g-gone",
        activated=start + 3 * minute,
        deactivated=MARCH_END - 4 * HOUR + 25 * minute,
        fee="daily",
    )
    subs.append(gone)
    for k in range(-10, 6):
        book, currency = (eur, "EUR") if k < -6 else (usd, "USD")
        for namespace in ("ns-a", "ns-b"):
            allocation(
                conn,
                cluster,
                hour=MARCH_END + k * HOUR,
                name="p",
                book=book,
                currency=currency,
                namespace=namespace,
                cpu="0.375",
                pv="1073741824",
                moved="2147483648",
                final=k < 3,
            )
    run(conn, cluster, MARCH_END + 2 * HOUR, subs)
    allocation(
        conn, cluster, hour=MARCH_END - 2 * HOUR, name="late", book=usd, currency="USD", cpu="1.5"
    )
    reprice(conn, cluster, MARCH_END - 5 * HOUR, eur, "EUR")
    back = subscription(
        "g-daily",
        activated=start + 8 * minute,
        deactivated=MARCH_END - 2 * HOUR + 10 * minute,
        fee="daily",
        meters=meters,
        margins=margins,
        namespace="ns-a",
    )
    newcomer = subscription("g-new", activated=start + 30 * minute, fee="hourly")
    subs = [back if b.sub.uid == "g-daily" else b for b in subs] + [newcomer]
    run(conn, cluster, GENERATED_END, subs)
    return subs
