"""Offering and Subscription version mirrors: one immutable row per observed version."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.db import builders


def test_observing_the_same_offering_version_twice_returns_the_same_row(
    conn: psycopg.Connection[Any],
) -> None:
    first = builders.offering_version(conn)
    before = builders.table_contents(conn, "offering_versions")
    again = builders.offering_version(conn)
    assert again == first
    assert builders.table_contents(conn, "offering_versions") == before


def test_a_new_generation_is_a_new_offering_version(conn: psycopg.Connection[Any]) -> None:
    first = builders.offering_version(conn, generation=1)
    second = builders.offering_version(conn, generation=2)
    rows = conn.execute(
        "SELECT generation, resource_version, spec FROM offering_versions ORDER BY id"
    ).fetchall()
    assert first != second
    assert [(g, rv) for g, rv, _ in rows] == [(1, "101"), (2, "102")]
    assert rows[0][2]["pricing"]["subscriptionFee"]["priceMicros"] == 40_000_000


def test_relabelling_the_namespace_makes_a_new_subscription_version(
    conn: psycopg.Connection[Any],
) -> None:
    acme = builders.subscription_version(conn, tenant="acme")
    again = builders.subscription_version(conn, tenant="acme")
    moved = builders.subscription_version(conn, tenant="globex")
    back = builders.subscription_version(conn, tenant="acme")
    labels = conn.execute(
        "SELECT namespace_labels ->> 'stakater.com/tenant' FROM subscription_versions ORDER BY id"
    ).fetchall()
    assert acme == again == back
    assert moved != acme
    assert labels == [("acme",), ("globex",)]


def test_the_tenant_label_is_indexed(conn: psycopg.Connection[Any]) -> None:
    (definition,) = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE tablename = 'subscription_versions' "
        "AND indexdef LIKE '%stakater.com/tenant%'"
    ).fetchone() or (None,)
    assert definition is not None
    for v in range(300):
        builders.subscription_version(conn, uid=f"sub-{v}", tenant=f"tenant-{v % 30}")
    conn.execute("ANALYZE subscription_versions")
    conn.execute("SET LOCAL enable_seqscan = off")
    plan = "\n".join(
        r[0]
        for r in conn.execute(
            "EXPLAIN SELECT id FROM subscription_versions "
            "WHERE namespace_labels ->> 'stakater.com/tenant' = 'tenant-7'"
        ).fetchall()
    )
    assert "subscription_versions_tenant" in plan


def test_mirror_rows_cannot_be_updated(conn: psycopg.Connection[Any]) -> None:
    version = builders.subscription_version(conn)
    with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="immutable"):
        conn.execute("UPDATE subscription_versions SET name = 'x' WHERE id = %s", (version,))
