"""Case 3: PostgreSQL restarted under a charge run and under the controller's version mirror.

The ledger here lives in a PostgreSQL cluster of its own (the session's is shared by every
test), which the test stops with a fast shutdown (every session cut) and starts again on the
same port.

Invariants: a charge run that loses the database fails with a `Failed` execution record,
writes `CostsResolved=True` reason `FromCalculator` on every Subscription it could price and
releases no finalizer; the next run, with the database back, leaves the ledger of a run that
never saw a restart. The controller stays healthy and keeps reconciling while the database is
down, and once it is back every Offering and Subscription version it observed is mirrored.
"""

from __future__ import annotations

import collections
import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psycopg
import pytest
from tests.faults import _harness as h
from tests.kube import _hierarchy as hier
from tests.kube.test_controller_support import ControllerProcess, running_controller, wait_for

from finops.store import migrate
from finops_devenv import controlplane, postgres
from finops_devenv import opencost_replay as replay

FAULTS = ("ledger transaction", "down at start", "ledger transaction", "down at start")


@pytest.fixture(scope="module")
def own_pg() -> Iterator[postgres.PostgresCluster]:
    """A cluster this module may stop and start."""
    with postgres.PostgresCluster() as cluster:
        yield cluster


def fresh_ledger(cluster: postgres.PostgresCluster) -> str:
    dsn = cluster.create_database()
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate.apply(conn)
    return dsn


@contextlib.contextmanager
def locked_until_restart(dsn: str, table: str) -> Iterator[None]:
    """Hold a lock on `table`'s writers; the restart cuts this session too."""
    conn = psycopg.connect(dsn)
    conn.execute(f"LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE".encode())
    try:
        yield
    finally:
        with contextlib.suppress(psycopg.Error):
            conn.close()


def failed_run(uni: h.Universe, pg: postgres.PostgresCluster, hour: Any, fault: str) -> int:
    """A charge run that loses PostgreSQL; the database is back when this returns."""
    try:
        if fault == "down at start":
            pg.stop_server()
            proc = uni.spawn(h.CHARGES, hour)
            return proc.wait()
        with locked_until_restart(uni.dsn, "subscription_charges"):
            proc = uni.spawn(h.CHARGES, hour)
            h.wait_until(
                "the charge transaction waiting",
                lambda: (
                    h.waiting_on_lock(uni.dsn, uni.app, *h.CHARGE_WRITES) > 0
                    or proc.proc.poll() is not None
                ),
            )
            assert proc.proc.poll() is None, proc.output()
            pg.stop_server()
        return proc.wait()
    finally:
        pg.start_server()


def reasons(uni: h.Universe) -> dict[str, str | None]:
    return {n: hier.reason(o, "CostsResolved") for n, o in uni.subscriptions().items()}


def test_a_charge_run_losing_postgres_fails_with_a_record_and_the_next_run_loses_nothing(
    universes: Callable[[], h.Universe],
    own_pg: postgres.PostgresCluster,
    kube: controlplane.ControlPlane,
    opencost: replay.ReplayServer,
) -> None:
    started = time.monotonic()
    plans = h.script(12, 8, deactivate_every=4, last_hour=len(FAULTS))
    reference = universes()
    restarted = h.Universe(kube, f"f-{uuid.uuid4().hex[:10]}", fresh_ledger(own_pg), opencost.url)
    for uni in (reference, restarted):
        uni.populate(plans)
    figures: collections.Counter[str] = collections.Counter()
    for n, fault in enumerate(FAULTS):
        hour = h.DAY0 + h.HOUR * n
        for uni in (reference, restarted):
            uni.churn(plans, hour)
            assert uni.run(h.ALLOCATIONS, hour)[0] == 0
        assert reference.run(h.CHARGES, hour)[0] == 0
        ref = reference.snapshot()
        present = frozenset(restarted.subscriptions())

        assert failed_run(restarted, own_pg, hour, fault) == 1
        figures[f"restarts: {fault}"] += 1
        record = restarted.costjob_history("charges")[0]
        assert record["status"] == "Failed"
        assert "charge ledger unavailable" in record["error"], record
        assert set(reasons(restarted).values()) == {"FromCalculator"}
        assert frozenset(restarted.subscriptions()) == present, "a finalizer went while failing"

        assert restarted.run(h.CHARGES, hour)[0] == 0
        now = restarted.snapshot()
        assert now.ledger == ref.ledger
        assert now.present == ref.present and now.costs == ref.costs
        assert h.costs_disagreements(now, hour) == []
        assert set(reasons(restarted).values()) == {"FromDB"}
        figures["rows_compared"] += h.rows_in(now.ledger)
    figures["seconds"] = round(time.monotonic() - started)
    h.write_figures("case3-postgres-restart-charges", dict(figures))


# ---------------------------------------------------------------- the controller's mirror


def mirror_writes(proc: ControllerProcess, result: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=5).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("finops_ledger_mirror_writes_total{") and f'result="{result}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def mirrored(dsn: str, namespace: str) -> set[tuple[str, int, str | None]]:
    """(name, generation, team label) of every Subscription version mirrored for `namespace`."""
    try:
        with psycopg.connect(dsn, connect_timeout=2) as conn:
            rows = conn.execute(
                "SELECT name, generation, namespace_labels ->> 'team' FROM subscription_versions "
                "WHERE namespace = %s",
                (namespace,),
            ).fetchall()
    except psycopg.OperationalError:
        return set()
    return {(str(a), int(b), c) for a, b, c in rows}


def relabel(kube: controlplane.ControlPlane, namespace: str, team: str) -> None:
    with kube.http() as client:
        resp = client.patch(
            f"/api/v1/namespaces/{namespace}",
            json={"metadata": {"labels": {"team": team}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
    assert resp.status_code == 200, resp.text


def create_subscriptions(kube: controlplane.ControlPlane, ns: str, names: list[str]) -> None:
    for name in names:
        body = hier.subscription_body(name, ns, "plain")
        with kube.http() as client:
            resp = client.post(hier.path("Subscription", ns), json=body)
        assert resp.status_code == 201, resp.text


def test_the_controller_keeps_reconciling_while_postgres_is_down_and_mirrors_everything_after(
    kube: controlplane.ControlPlane, own_pg: postgres.PostgresCluster, book: dict[str, Any]
) -> None:
    started = time.monotonic()
    dsn = fresh_ledger(own_pg)
    ns = f"f-{uuid.uuid4().hex[:10]}"
    kube.create_namespace(ns, labels={**h.TENANT_LABELS, "team": "before"})
    env = {
        **hier.NO_WEBHOOKS,
        "POSTGRES_CONNECTION_STRING": dsn,
        "CLUSTER_ID": h.CLUSTER,
        "FINOPS_RESYNC_SECONDS": "2",
    }
    first = [f"early-{i}" for i in range(5)]
    later = [f"late-{i}" for i in range(5)]
    with running_controller(kube, ns, env=env, skip_db=False) as proc:
        with kube.http() as client:
            resp = client.post(hier.path("Offering", ns), json=hier.offering_body("plain", ns))
        assert resp.status_code == 201, resp.text
        create_subscriptions(kube, ns, first)
        for name in first:
            hier.wait_reason(kube, "Subscription", ns, name, "Active", "ActivationSucceeded")
        wait_for(lambda: {n for n, _, _ in mirrored(dsn, ns)} >= set(first), what="first mirror")
        errors_before = mirror_writes(proc, "error")

        # Down while a burst of new versions arrives: new Subscriptions and a relabelled
        # namespace (a new version of every Subscription in it).
        create_subscriptions(kube, ns, later)
        own_pg.stop_server()
        try:
            relabel(kube, ns, "after")
            for name in later:
                hier.wait_reason(kube, "Subscription", ns, name, "Active", "ActivationSucceeded")
            wait_for(lambda: mirror_writes(proc, "error") > errors_before, what="failed writes")
            assert proc.healthy()
        finally:
            own_pg.start_server()
        want = {(n, 1, "after") for n in first + later} | {(n, 1, "before") for n in first}
        got = wait_for(
            lambda: (found := mirrored(dsn, ns)) >= want and found, timeout=60, what="re-mirror"
        )
        assert proc.healthy()
        failed = mirror_writes(proc, "error") - errors_before
    assert {v for v in got if v[0] in first + later} >= want
    h.write_figures(
        "case3-postgres-restart-controller",
        {
            "versions_expected": len(want),
            "versions_mirrored": len(got),
            "mirror_writes_failed_while_down": int(failed),
            "seconds": round(time.monotonic() - started),
        },
    )
