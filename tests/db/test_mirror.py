"""Offering and Subscription version mirrors: one immutable row per observed version."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from finops.store import charge_inputs
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


def test_a_subscription_version_carries_the_subscription_labels(
    conn: psycopg.Connection[Any],
) -> None:
    version = builders.subscription_version(conn, subscription_labels={"cost-center": "cc-42"})
    plain = builders.subscription_version(conn, uid="sub-uid-2")
    rows = dict(
        conn.execute(
            "SELECT id, subscription_labels FROM subscription_versions WHERE id = ANY(%s)",
            ([version, plain],),
        ).fetchall()
    )
    assert rows == {version: {"cost-center": "cc-42"}, plain: {}}


def test_relabelling_the_subscription_makes_a_new_version_keeping_the_old_one(
    conn: psycopg.Connection[Any],
) -> None:
    first = builders.subscription_version(conn, subscription_labels={"cost-center": "cc-42"})
    again = builders.subscription_version(conn, subscription_labels={"cost-center": "cc-42"})
    moved = builders.subscription_version(conn, subscription_labels={"cost-center": "cc-7"})
    unlabelled = builders.subscription_version(conn)
    back = builders.subscription_version(conn, subscription_labels={"cost-center": "cc-42"})
    rows = conn.execute(
        "SELECT generation, namespace_labels ->> 'stakater.com/tenant', subscription_labels "
        "FROM subscription_versions ORDER BY id"
    ).fetchall()
    assert first == again == back
    assert len({first, moved, unlabelled}) == 3
    assert rows == [
        (1, "acme", {"cost-center": "cc-42"}),
        (1, "acme", {"cost-center": "cc-7"}),
        (1, "acme", {}),
    ]


def test_the_collection_job_batch_path_agrees_with_the_controller_upsert(
    conn: psycopg.Connection[Any],
) -> None:
    """Both writers key a version the same way: the job finds the controller's row and adds
    only the relabelled version, with its labels."""
    namespace = {"kubernetes.io/metadata.name": "team-a", "stakater.com/tenant": "acme"}
    by_controller = builders.subscription_version(conn, subscription_labels={"app": "web"})
    asked = [("sub-uid-1", 1, namespace, {"app": "web"})]
    assert charge_inputs.known_subscription_versions(
        conn, cluster=builders.CLUSTER, versions=asked
    ) == {("sub-uid-1", 1): by_controller}
    relabelled = [("sub-uid-1", 1, namespace, {"app": "api"})]
    assert (
        charge_inputs.known_subscription_versions(
            conn, cluster=builders.CLUSTER, versions=relabelled
        )
        == {}
    )
    meta = {"uid": "sub-uid-1", "namespace": "team-a", "name": "sub-sub-uid-1", "generation": 1}
    added = charge_inputs.add_subscription_versions(
        conn,
        cluster=builders.CLUSTER,
        versions=[(meta, {}, namespace, {"app": "api"}), (meta, {}, namespace, {"app": "web"})],
    )
    found = charge_inputs.known_subscription_versions(
        conn, cluster=builders.CLUSTER, versions=relabelled
    )
    assert found.keys() == {("sub-uid-1", 1)} and found[("sub-uid-1", 1)] != by_controller
    # Only the row it inserted comes back (the controller's is kept, not returned).
    assert added == found
    stored = conn.execute(
        "SELECT subscription_labels FROM subscription_versions ORDER BY id"
    ).fetchall()
    assert stored == [({"app": "web"},), ({"app": "api"},)]


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
