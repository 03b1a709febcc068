"""The docs' family on a real API server, the controller as a process, the ledger in PostgreSQL.

The tree is the one the compatibility-and-hierarchy page draws: acme-bundle at the root;
acme-vm, acme-disk and acme-monitor below it; acme-alert below acme-monitor; acme-vm-spare
below acme-alert. disk, monitor and alert require vm-standard, which only acme-vm covers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from tests.kube import _hierarchy as h
from tests.kube.test_controller_support import (
    ControllerProcess,
    create,
    delete,
    events_for,
    merge_patch,
    running_controller,
    wait_for,
    wait_more_reconciles,
)

from finops_devenv import controlplane

TREE = [  # (name, offering, parent)
    ("acme-bundle", "platform-core", None),
    ("acme-vm", "vm-standard", "acme-bundle"),
    ("acme-disk", "vm-disk", "acme-bundle"),
    ("acme-monitor", "monitoring", "acme-bundle"),
    ("acme-alert", "alerting", "acme-monitor"),
    ("acme-vm-spare", "vm-standard", "acme-alert"),
]
REQUIRING = {"acme-disk", "acme-monitor", "acme-alert"}
OFFERINGS: dict[str, list[str]] = {
    "platform-core": [],
    "vm-standard": [],
    "vm-disk": ["vm-standard"],
    "monitoring": ["vm-standard"],
    "alerting": ["vm-standard"],
}
TENANT = "stakater.com/tenant"
SUBSCRIPTIONS = "subscription"


@pytest.fixture
def tenant_namespace(kube: controlplane.ControlPlane) -> str:
    name = f"acme-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(name, labels={TENANT: "acme-corp", "team": "platform"})
    return name


@pytest.fixture
def cluster_id() -> str:
    return f"e2e-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def controller(
    kube: controlplane.ControlPlane, tenant_namespace: str, ledger_dsn: str, cluster_id: str
) -> Iterator[ControllerProcess]:
    env = {
        **h.NO_WEBHOOKS,
        "POSTGRES_CONNECTION_STRING": ledger_dsn,
        "CLUSTER_ID": cluster_id,
        "FINOPS_RESYNC_SECONDS": "2",
    }
    with running_controller(kube, tenant_namespace, env=env, skip_db=False) as proc:
        yield proc


def rows(dsn: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return list(conn.execute(sql, args).fetchall())


def build_family(kube: controlplane.ControlPlane, ns: str) -> None:
    for name, requires in OFFERINGS.items():
        create(kube, h.path("Offering", ns), h.offering_body(name, ns, requires=requires))
    for name, offering, parent in reversed(TREE):  # children first: order must not matter
        create(
            kube,
            h.path("Subscription", ns),
            h.subscription_body(name, ns, offering, parent=parent),
        )


def active_reason(kube: controlplane.ControlPlane, ns: str, name: str) -> str | None:
    return h.reason(h.fetch(kube, "Subscription", ns, name), "Active")


def test_deleting_acme_vm_ends_exactly_the_requiring_members_and_recreating_revives_none(
    kube: controlplane.ControlPlane, tenant_namespace: str, controller: ControllerProcess
) -> None:
    ns = tenant_namespace
    build_family(kube, ns)
    for name, _, _ in TREE:
        h.wait_reason(kube, "Subscription", ns, name, "Active", "ActivationSucceeded")
    root_uid = h.fetch(kube, "Subscription", ns, "acme-bundle")["metadata"]["uid"]
    for name, _, _ in TREE:
        assert h.fetch(kube, "Subscription", ns, name)["status"]["compatibilityRoot"] == root_uid

    delete(kube, h.path("Subscription", ns, "acme-vm"))
    for name in REQUIRING:
        obj = h.wait_reason(
            kube, "Subscription", ns, name, "Active", "CompatibilityRequirementNotMet"
        )
        assert obj["status"]["deactivatedAt"]
        assert h.reason(obj, "Ready") == "ValidationSucceeded"
        causes = wait_for(  # Events are posted in the background, after the status
            lambda n=name: [
                e["message"] for e in events_for(kube, ns, n) if e["reason"] == "Deactivated"
            ],
            what="Deactivated event",
        )
        assert any(c.startswith("CompatibilityRequirementNotMet: ") for c in causes)
    h.wait_reason(kube, "Subscription", ns, "acme-vm-spare", "Active", "ParentDeactivated")
    h.wait_reason(kube, "Subscription", ns, "acme-vm", "Active", "MarkedForDeletion")
    assert active_reason(kube, ns, "acme-bundle") == "ActivationSucceeded"
    ended = {
        name: h.fetch(kube, "Subscription", ns, name)["status"]["deactivatedAt"]
        for name in REQUIRING | {"acme-vm-spare"}
    }

    # The charge job settles acme-vm; a new acme-vm activates and revives nobody.
    h.strip_finalizers(kube, "Subscription", ns, "acme-vm")
    wait_for(lambda: h.gone(kube, "Subscription", ns, "acme-vm"), what="acme-vm gone")
    create(
        kube,
        h.path("Subscription", ns),
        h.subscription_body("acme-vm", ns, "vm-standard", parent="acme-bundle"),
    )
    h.wait_reason(kube, "Subscription", ns, "acme-vm", "Active", "ActivationSucceeded")
    wait_more_reconciles(controller, SUBSCRIPTIONS, count=2 * len(TREE))
    for name, at in ended.items():
        obj = h.fetch(kube, "Subscription", ns, name)
        assert obj["status"]["deactivatedAt"] == at
        assert h.reason(obj, "Active") != "ActivationSucceeded"


def test_every_observed_version_is_mirrored_with_the_namespace_labels_and_tenant(
    kube: controlplane.ControlPlane,
    tenant_namespace: str,
    controller: ControllerProcess,
    ledger_dsn: str,
    cluster_id: str,
) -> None:
    ns = tenant_namespace
    build_family(kube, ns)
    for name, _, _ in TREE:
        h.wait_reason(kube, "Subscription", ns, name, "Active", "ActivationSucceeded")

    def offering_rows() -> list[tuple[Any, ...]]:
        return rows(
            ledger_dsn,
            "SELECT name, generation, spec FROM offering_versions "
            "WHERE cluster = %s AND namespace = %s ORDER BY name",
            cluster_id,
            ns,
        )

    def tenant_rows(tenant: str) -> list[tuple[Any, ...]]:
        return rows(
            ledger_dsn,
            "SELECT name, generation, namespace_labels FROM subscription_versions "
            "WHERE cluster = %s AND namespace = %s "
            "AND namespace_labels ->> 'stakater.com/tenant' = %s",
            cluster_id,
            ns,
            tenant,
        )

    def exactly(found: list[tuple[Any, ...]], count: int) -> list[tuple[Any, ...]] | None:
        return found if len(found) == count else None

    mirrored = wait_for(
        lambda: exactly(offering_rows(), len(OFFERINGS)), what="one row per Offering"
    )
    assert {r[0] for r in mirrored} == set(OFFERINGS)
    assert all(r[1] == 1 for r in mirrored)
    disk = next(r for r in mirrored if r[0] == "vm-disk")
    assert disk[2]["compatibility"]["requiredOfferings"] == [h.ref("vm-standard", ns)]

    first = wait_for(
        lambda: exactly(tenant_rows("acme-corp"), len(TREE)), what="one row per Subscription"
    )
    assert {r[0] for r in first} == {name for name, _, _ in TREE}
    assert all(r[2]["team"] == "platform" for r in first)

    # A new generation of one Subscription is a new version.
    merge_patch(
        kube,
        h.path("Subscription", ns, "acme-bundle"),
        {"spec": {"usageSources": [{"namespace": ns}]}},
    )
    wait_for(
        lambda: any(r[0] == "acme-bundle" and r[1] == 2 for r in tenant_rows("acme-corp")),
        what="generation 2 mirrored",
    )
    # Relabelling the namespace moves later versions to the new tenant, keeping the old rows.
    merge_patch(kube, f"/api/v1/namespaces/{ns}", {"metadata": {"labels": {TENANT: "globex"}}})
    moved = wait_for(
        lambda: exactly(tenant_rows("globex"), len(TREE)), what="rows under the new tenant"
    )
    assert all(r[2]["team"] == "platform" for r in moved)
    assert len(tenant_rows("acme-corp")) == len(TREE) + 1


def test_a_relabelled_subscription_is_a_new_version_carrying_its_labels(
    kube: controlplane.ControlPlane,
    tenant_namespace: str,
    controller: ControllerProcess,
    ledger_dsn: str,
    cluster_id: str,
) -> None:
    ns = tenant_namespace
    create(kube, h.path("Offering", ns), h.offering_body("platform-core", ns))
    body = h.subscription_body("acme", ns, "platform-core")
    body["metadata"]["labels"] = {"cost-center": "cc-42"}
    create(kube, h.path("Subscription", ns), body)

    def versions() -> list[tuple[Any, ...]]:
        return rows(
            ledger_dsn,
            "SELECT generation, namespace_labels ->> %s, subscription_labels "
            "FROM subscription_versions WHERE cluster = %s AND namespace = %s "
            "AND name = 'acme' ORDER BY id",
            TENANT,
            cluster_id,
            ns,
        )

    def count(n: int) -> list[tuple[Any, ...]] | None:
        found = versions()
        return found if len(found) == n else None

    first = wait_for(lambda: count(1), what="the labelled Subscription mirrored")
    assert first == [(1, "acme-corp", {"cost-center": "cc-42"})]
    # Labels change without a new generation, yet make a new version; the old one stays.
    merge_patch(
        kube, h.path("Subscription", ns, "acme"), {"metadata": {"labels": {"cost-center": "cc-7"}}}
    )
    both = wait_for(lambda: count(2), what="the relabelled Subscription mirrored")
    assert both == [*first, (1, "acme-corp", {"cost-center": "cc-7"})]


def mirror_errors(proc: ControllerProcess) -> float:
    text = httpx.get(f"http://127.0.0.1:{proc.metrics_port}/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("finops_ledger_mirror_writes_total{") and 'result="error"' in line
    )


def test_a_failing_ledger_does_not_block_activation_and_is_retried(
    kube: controlplane.ControlPlane,
    tenant_namespace: str,
    controller: ControllerProcess,
    ledger_dsn: str,
    cluster_id: str,
) -> None:
    ns = tenant_namespace
    with psycopg.connect(ledger_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE subscription_versions RENAME TO subscription_versions_away")
    try:
        create(kube, h.path("Offering", ns), h.offering_body("platform-core", ns))
        create(kube, h.path("Subscription", ns), h.subscription_body("acme", ns, "platform-core"))
        h.wait_reason(kube, "Subscription", ns, "acme", "Active", "ActivationSucceeded")
        wait_for(lambda: mirror_errors(controller) > 0, what="a counted mirror failure")
    finally:
        with psycopg.connect(ledger_dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE subscription_versions_away RENAME TO subscription_versions")
    wait_for(
        lambda: rows(
            ledger_dsn,
            "SELECT 1 FROM subscription_versions WHERE cluster = %s AND name = 'acme'",
            cluster_id,
        ),
        timeout=60,
        what="the row written on retry",
    )
