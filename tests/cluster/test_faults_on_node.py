"""Faults on the real node: what a platform team's cluster does to the product's pods.

The chart is installed again with its bundled dependencies (the ledger's volume and the
database credentials kept from the release before it, as `helm uninstall` keeps them), the
examples applied with the CostJobs hourly so that the runs here are the ones started by hand.
Then: the manager's pod is killed while Subscriptions converge; a job pod is killed in the
middle of its run and the next run repairs the ledger; the PostgreSQL pod is killed and its
StatefulSet brings it back with every row kept on the volume.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from finops_devenv import opencost_replay as replay
from finops_devenv import realnode, release
from tests.cluster import _chart
from tests.cluster._chart import NAMESPACE, RELEASE

pytestmark = pytest.mark.faults

LOAD = "team-load"
BURST = 40


@pytest.fixture(scope="module")
def installed(
    node: realnode.RealNode,
    images: dict[str, realnode.Image],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    values = release.merge(
        release.image_values(images),
        {"certManager": {"enabled": False}, "mdoDependencies": {"enabled": True}},
    )
    release.install(node, values, tmp_path_factory.mktemp("faults"))
    node.apply(release.examples("1h"))
    yield RELEASE


def manager_pod(node: realnode.RealNode) -> dict[str, Any]:
    (pod,) = _chart.pods(node, NAMESPACE, "control-plane=controller-manager")
    return pod


def test_the_manager_killed_while_subscriptions_converge_leaves_every_one_active(
    node: realnode.RealNode, installed: str
) -> None:
    node.kubectl("create", "namespace", LOAD)
    platform = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "Subscription",
        "metadata": {"name": "platform", "namespace": LOAD},
        "spec": {"offeringRef": {"name": "platform-base", "namespace": NAMESPACE}},
    }
    burst = [
        {
            "apiVersion": "finops.stakater.com/v1alpha1",
            "kind": "Subscription",
            "metadata": {"name": f"obs-{i:03d}", "namespace": LOAD},
            "spec": {
                "offeringRef": {"name": "observability", "namespace": NAMESPACE},
                "parent": {"subscriptionRef": {"name": "platform", "namespace": LOAD}},
                "usageSources": [{"namespace": "prometheus-system"}],
            },
        }
        for i in range(BURST)
    ]
    old = manager_pod(node)["metadata"]["name"]
    node.apply([platform, *burst])
    # As a node failure would: no grace, no chance to finish what it was writing.
    node.kubectl("delete", "pod", old, "-n", NAMESPACE, "--grace-period=0", "--force")

    def active() -> list[dict[str, Any]]:
        return [
            s
            for s in release.items(node, "subscriptions", "-n", LOAD)
            if _chart.condition(s, "Active").get("status") == "True"
        ]

    everyone = BURST + 1
    release.wait_for(node, "the burst active", lambda: len(active()) == everyone, 240, every=2)
    assert manager_pod(node)["metadata"]["name"] != old
    first = {s["metadata"]["name"]: s["status"]["activatedAt"] for s in active()}
    for sub in active():
        assert sub["metadata"]["finalizers"] == ["subscriptions.finops.stakater.com/finalizer"]
    time.sleep(15)  # a resync or two later, nothing has moved
    assert {s["metadata"]["name"]: s["status"]["activatedAt"] for s in active()} == first


def allocation_rows(
    node: realnode.RealNode, start: dt.datetime, end: dt.datetime
) -> dict[str, str]:
    """Per hour of [start, end): a digest of every allocation row (name, quantities, final)."""
    rows = _chart.psql(
        node,
        "SELECT to_char(hour AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24'),"
        " md5(string_agg(concat_ws(',', namespace, name, cpu_core_hours, ram_byte_hours,"
        " pv_byte_hours, is_finalized), ';' ORDER BY namespace, name)), count(*)"
        f" FROM provider_allocations WHERE hour >= '{start.isoformat()}'"
        f" AND hour < '{end.isoformat()}'"
        " AND aggregation = 'namespace,pod,container' GROUP BY 1 ORDER BY 1",
    )
    out: dict[str, str] = {}
    for line in rows.splitlines():
        hour, digest, count = line.split("\t")
        out[hour] = f"{digest}/{count}"
    return out


def container_id(pod: dict[str, Any]) -> str:
    (status,) = pod["status"]["containerStatuses"]
    return str(status["containerID"])


def test_a_job_pod_killed_mid_run_is_repaired_by_the_next_run(
    node: realnode.RealNode, installed: str
) -> None:
    # A slow OpenCost (three seconds an answer, on this machine) holds the run long enough
    # to kill it after its first hour is fetched and before its last. The run is one the
    # CronJob makes ten or more hours from now, at the first such hour none of whose six hours
    # (the hour and five of lookback) is in the ledger yet: the release's database also holds
    # what the tier's earlier runs wrote, some of it ahead of now (the uninstall test's run at
    # the next day's 02:05 writes the five hours before it, final). Only the run's own six
    # hours are compared.
    now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    hour = dt.timedelta(hours=1)
    ahead = next(
        k
        for k in range(10, 200, 6)
        if not allocation_rows(node, now + (k - 5) * hour, now + (k + 1) * hour)
    )
    scheduled = now + ahead * hour + dt.timedelta(minutes=5)
    start, end = now + (ahead - 5) * hour, now + (ahead + 1) * hour
    with replay.ReplayServer(replay.Captures(), host=realnode.NODE_IP) as slow:
        slow.inject(replay.Fault("slow", delay=3.0))
        release.job_from_cronjob(
            node, NAMESPACE, _chart.ALLOCATION_CRONJOB, "killed", scheduled,
            env={"OPENCOST_CONNECTION_STRING": slow.url},
        )  # fmt: skip

        def first_hour_fetched() -> bool:
            logs = node.kubectl("logs", "-n", NAMESPACE, "job/killed", check=False).stdout
            return "allocation rows fetched" in logs

        release.wait_for(node, "the first hour fetched", first_hour_fetched, 120, every=0.5)
        (pod,) = _chart.pods(node, NAMESPACE, "job-name=killed")
        try:
            node.kill_container(container_id(pod))
        except realnode.RealNodeError as exc:
            # The container is gone before the kill: say how it ended and what it logged.
            (pod,) = _chart.pods(node, NAMESPACE, "job-name=killed")
            logs = node.kubectl("logs", "-n", NAMESPACE, "job/killed", check=False).stdout
            raise AssertionError(
                f"{exc}\n{json.dumps(pod['status'], indent=1)[:3000]}\n{logs[-3000:]}"
            ) from exc
        release.wait_for(
            node,
            "the killed run's Job completed by its restarted container",
            lambda: release.job_finished(node, NAMESPACE, "killed") == "Complete",
            240,
        )
    (pod,) = _chart.pods(node, NAMESPACE, "job-name=killed")
    (status,) = pod["status"]["containerStatuses"]
    assert status["restartCount"] >= 1, status
    repaired = allocation_rows(node, start, end)
    assert len(repaired) == 6 and all(v.endswith("/16") for v in repaired.values()), repaired
    # The next scheduled run of the same hour finds nothing to change.
    release.run_job(node, NAMESPACE, _chart.ALLOCATION_CRONJOB, "next", scheduled)
    assert allocation_rows(node, start, end) == repaired


def ledger_digest(node: realnode.RealNode) -> str:
    return _chart.psql(
        node,
        "SELECT (SELECT count(*) FROM provider_allocations)"
        " || '/' || (SELECT count(*) FROM subscription_charges)"
        " || '/' || (SELECT coalesce(sum(amount_micros), 0) FROM subscription_charges)",
    )


def test_the_postgres_pod_killed_comes_back_with_every_row(
    node: realnode.RealNode, installed: str
) -> None:
    release.run_job(node, NAMESPACE, _chart.CHARGE_CRONJOB, "before-kill")
    before = ledger_digest(node)
    assert not before.startswith("0/")
    pod = f"{RELEASE}-postgres-0"
    uid = release.get(node, "pod", "-n", NAMESPACE, pod)["metadata"]["uid"]
    node.kubectl("delete", "pod", pod, "-n", NAMESPACE, "--grace-period=0", "--force")

    def back() -> bool:
        found = release.get(node, "pod", "-n", NAMESPACE, pod)
        if not found or found["metadata"]["uid"] == uid:
            return False
        # A new pod reports no container statuses until the kubelet has started it.
        statuses = found.get("status", {}).get("containerStatuses") or []
        return bool(statuses) and all(c.get("ready") for c in statuses)

    release.wait_for(node, "the PostgreSQL pod back and ready", back, 180, every=2)
    assert ledger_digest(node) == before
    # The product carries on against the database that came back.
    release.run_job(node, NAMESPACE, _chart.CHARGE_CRONJOB, "after-kill")
    release.wait_for(
        node,
        "the manager and the gateway ready after the database came back",
        lambda: release.workloads_available(node, NAMESPACE),
        120,
    )
