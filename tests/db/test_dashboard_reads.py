"""The dashboard's ledger reads: UTC buckets, series keys, Offering breakdown, currency."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import psycopg

from finops.store import allocations, mirror
from finops.store import dashboard as queries
from tests.db import builders
from tests.db.builders import CLUSTER
from tests.oracle import charge_rows
from tests.oracle import ledger as oracle_ledger

START = dt.datetime(2026, 4, 1, 22, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)


def _subscription(conn: psycopg.Connection[Any], namespace: str, name: str) -> int:
    return mirror.upsert_subscription_version(
        conn,
        cluster=CLUSTER,
        uid=f"{namespace}/{name}",
        namespace=namespace,
        name=name,
        generation=1,
        resource_version="1",
        spec={"offeringRef": {"name": "platform-base"}},
        namespace_labels={},
    )


def _charge(
    version: int, offering: int, uid: str, n: int, source: str, micros: int
) -> charge_rows.ChargeRow:
    return charge_rows.ChargeRow(
        CLUSTER, uid, START + n * HOUR, source, Decimal(1), micros, micros, "EUR", n < 2,
        offering, version,
    )  # fmt: skip


def _ledger(conn: psycopg.Connection[Any]) -> None:
    """team-a/web: fee and CPU over 22:00..01:00 (crossing midnight); team-b/db: one fee."""
    offering = builders.offering_version(conn)
    web = _subscription(conn, "team-a", "web")
    other = _subscription(conn, "team-b", "db")
    rows = [_charge(web, offering, "team-a/web", n, "subscription", 1_000_000) for n in range(4)]
    rows += [_charge(web, offering, "team-a/web", n, "cpuHour", 10 + n) for n in range(4)]
    rows.append(_charge(other, offering, "team-b/db", 0, "subscription", 7_000_000))
    oracle_ledger.upsert(conn, rows)


def test_daily_buckets_split_at_utc_midnight_and_keep_exact_micros(
    conn: psycopg.Connection[Any],
) -> None:
    _ledger(conn)
    points = queries.cost_series(
        conn,
        cluster=CLUSTER,
        namespaces=["team-a"],
        start=START,
        end=START + 4 * HOUR,
        step=queries.Step.DAY,
        group_by=queries.GroupBy.SOURCE,
    )
    day1, day2 = START.replace(hour=0), START.replace(hour=0) + dt.timedelta(days=1)
    assert [(p.bucket, p.key, p.currency, p.amount_micros) for p in points] == [
        (day1, "cpuHour", "EUR", 10 + 11),
        (day1, "subscription", "EUR", 2_000_000),
        (day2, "cpuHour", "EUR", 12 + 13),
        (day2, "subscription", "EUR", 2_000_000),
    ]


def test_series_by_subscription_span_only_the_namespaces_asked_for(
    conn: psycopg.Connection[Any],
) -> None:
    _ledger(conn)

    def keys(namespaces: list[str]) -> dict[str, int]:
        points = queries.cost_series(
            conn,
            cluster=CLUSTER,
            namespaces=namespaces,
            start=START,
            end=START + HOUR,
            step=queries.Step.HOUR,
            group_by=queries.GroupBy.SUBSCRIPTION,
        )
        return {p.key: p.amount_micros for p in points}

    assert keys(["team-a"]) == {"team-a/web": 1_000_010}
    assert keys(["team-a", "team-b"]) == {"team-a/web": 1_000_010, "team-b/db": 7_000_000}
    assert keys([]) == {}


def test_the_breakdown_names_the_offering_and_splits_finalized_micros(
    conn: psycopg.Connection[Any],
) -> None:
    _ledger(conn)
    rows = queries.cost_breakdown(
        conn, cluster=CLUSTER, namespaces=["team-a"], start=START, end=START + 4 * HOUR
    )
    got = [(r.subscription, r.offering, r.source, r.total_micros, r.finalized_micros) for r in rows]
    assert got == [
        ("web", "platform-base", "cpuHour", 46, 21),
        ("web", "platform-base", "subscription", 4_000_000, 2_000_000),
    ]
    assert {r.offering_namespace for r in rows} == {"finops-operator-system"}
    assert queries.charged_namespaces(conn, cluster=CLUSTER) == ["team-a", "team-b"]


def test_the_active_currency_is_the_book_that_priced_the_latest_collected_hour(
    conn: psycopg.Connection[Any],
) -> None:
    assert queries.active_currency(conn, cluster=CLUSTER) is None
    usd = builders.pricebook(conn)
    assert queries.active_currency(conn, cluster=CLUSTER) == "USD"
    eur = allocations.ensure_pricebook(
        conn,
        cluster=CLUSTER,
        namespace="finops-operator-system",
        name="eu",
        uid="pb-eu",
        currency="EUR",
        rates={"cpuHour": 1},
    )
    oracle_ledger.ingest(
        conn, [builders.alloc(at=5)], pricebook_id=usd, currency="USD", finalized=False
    )
    oracle_ledger.ingest(
        conn, [builders.alloc(at=1)], pricebook_id=eur, currency="EUR", finalized=False
    )
    assert queries.active_currency(conn, cluster=CLUSTER) == "USD"
