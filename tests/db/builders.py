"""Small builders for ledger rows used across the db tests."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import psycopg

from finops.billing import allocation
from finops.store import allocations, migrate, mirror

CLUSTER = "default"
H0 = dt.datetime(2026, 4, 1, 9, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
RATES = {"cpuHour": 31_000, "ramGbHour": 4_000, "pvGbHour": 120, "gpuHour": 1_800_000}


def hour(n: int) -> dt.datetime:
    """The n-th hour after H0."""
    return H0 + n * HOUR


def alloc(
    name: str = "team-a/web-1/app",
    *,
    at: int = 0,
    namespace: str = "team-a",
    cpu: str = "0.25",
    **extra: Any,
) -> allocation.AllocationRow:
    """An allocation row for hour `at` with exact, non-trivial quantities."""
    start = hour(at)
    fields: dict[str, Any] = {
        "cluster": CLUSTER,
        "name": name,
        "namespace": namespace,
        "aggregation": "namespace,pod,container",
        "hour": start,
        "start": start + dt.timedelta(minutes=5),
        "end": start + HOUR,
        "minutes": Decimal("55"),
        "controller_kind": "deployment",
        "controller_name": "web",
        "pod": "web-1",
        "container": "app",
        "node": "node-a",
        "labels": {"app": "web", "stakater.com/tenant": "acme"},
        "cpu_core_request_average": Decimal("0.50"),
        "cpu_core_usage_average": Decimal("0.12345678901234567890"),
        "cpu_core_hours": Decimal(cpu),
        "ram_byte_request_average": Decimal("536870912"),
        "ram_byte_usage_average": Decimal("268435456.5"),
        "ram_byte_hours": Decimal("491520000.00001"),
        "pv_byte_hours": Decimal("1073741824"),
        "network_transfer_bytes": Decimal("1024.5"),
        "network_receive_bytes": Decimal("2048"),
    }
    fields.update(extra)
    return allocation.AllocationRow(**fields)


def pricebook(conn: psycopg.Connection[Any], rates: dict[str, int] | None = None) -> int:
    """The id of a `pricebooks` row for one PriceBook with `rates` (default RATES)."""
    return allocations.ensure_pricebook(
        conn,
        cluster=CLUSTER,
        namespace="finops-operator-system",
        name="onprem-standard",
        uid="pb-uid-1",
        currency="USD",
        rates=RATES if rates is None else rates,
        generation=1,
    )


def offering_version(conn: psycopg.Connection[Any], *, generation: int = 1) -> int:
    return mirror.upsert_offering_version(
        conn,
        cluster=CLUSTER,
        uid="off-uid-1",
        namespace="finops-operator-system",
        name="platform-base",
        generation=generation,
        resource_version=f"{100 + generation}",
        spec={"pricing": {"subscriptionFee": {"priceMicros": 40_000_000, "period": "1h"}}},
    )


def subscription_version(
    conn: psycopg.Connection[Any],
    *,
    uid: str = "sub-uid-1",
    tenant: str | None = "acme",
    generation: int = 1,
    subscription_labels: dict[str, str] | None = None,
) -> int:
    labels = {"kubernetes.io/metadata.name": "team-a"}
    if tenant is not None:
        labels["stakater.com/tenant"] = tenant
    return mirror.upsert_subscription_version(
        conn,
        cluster=CLUSTER,
        uid=uid,
        namespace="team-a",
        name=f"sub-{uid}",
        generation=generation,
        resource_version=f"{200 + generation}",
        spec={"offeringRef": {"name": "platform-base", "namespace": "finops-operator-system"}},
        namespace_labels=labels,
        subscription_labels=subscription_labels,
    )


def table_contents(conn: psycopg.Connection[Any], table: str) -> list[str]:
    """Every row of `table` as PostgreSQL's own text form, sorted: a byte-level snapshot."""
    rows = conn.execute(
        psycopg.sql.SQL("SELECT t::text FROM {} t").format(psycopg.sql.Identifier(table))
    ).fetchall()
    return sorted(r[0] for r in rows)


def applied_versions(conn: psycopg.Connection[Any]) -> list[int]:
    """Versions recorded in `schema_migrations`, ascending (empty before the first run)."""
    exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return []
    return sorted(migrate._applied(conn))
