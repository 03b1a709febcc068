"""Two controller replicas under Lease election: only the leader acts; hand-over works."""

from __future__ import annotations

import signal
import time
from typing import Any

from tests.kube.test_controller_support import (
    FINOPS,
    ControllerProcess,
    create,
    get,
    reconciles,
    wait_for,
)

from finops.kube import leader
from finops_devenv import controlplane

LEASE_SECONDS = 4.0


def replica(kube: controlplane.ControlPlane, ns: str) -> ControllerProcess:
    return ControllerProcess(
        kube,
        namespace=ns,
        env={"FINOPS_LEASE_DURATION_SECONDS": str(LEASE_SECONDS)},
        args=["--leader-elect"],
    ).start()


def leads(proc: ControllerProcess) -> bool:
    return "became leader" in proc.logs()


def lease(kube: controlplane.ControlPlane, ns: str) -> dict[str, Any]:
    obj = get(kube, f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{leader.ELECTION_ID}")
    return dict((obj or {}).get("spec") or {})


def costjob(kube: controlplane.ControlPlane, ns: str, name: str) -> None:
    create(
        kube,
        f"{FINOPS}/namespaces/{ns}/costjobs",
        {
            "apiVersion": "finops.stakater.com/v1alpha1",
            "kind": "CostJob",
            "metadata": {"name": name},
            "spec": {"interval": "1h"},
        },
    )


def cronjob_exists(kube: controlplane.ControlPlane, ns: str, name: str) -> bool:
    return get(kube, f"/apis/batch/v1/namespaces/{ns}/cronjobs/{name}-cronjob") is not None


def test_only_the_leader_acts_and_a_killed_leader_is_replaced_within_the_lease(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    ns = kube_namespace
    first = replica(kube, ns)
    second: ControllerProcess | None = None
    try:
        wait_for(lambda: leads(first), what="first replica leads")
        second = replica(kube, ns)
        costjob(kube, ns, "one")
        wait_for(lambda: cronjob_exists(kube, ns, "one"), what="leader created the CronJob")
        time.sleep(1)  # give a misbehaving standby the chance to show itself
        assert not leads(second)
        assert "caches synced" not in second.logs()
        assert reconciles(second, "costjob-controller") == 0
        holder = lease(kube, ns)["holderIdentity"]

        killed_at = time.monotonic()
        first.stop(signal.SIGKILL)
        wait_for(lambda: leads(second), timeout=LEASE_SECONDS * 4, what="standby takes over")
        took = time.monotonic() - killed_at
        assert took <= LEASE_SECONDS * 2.5, f"hand-over took {took:.1f}s"
        assert lease(kube, ns)["holderIdentity"] not in (None, "", holder)
        costjob(kube, ns, "two")
        wait_for(lambda: cronjob_exists(kube, ns, "two"), what="new leader acts")

        assert second.stop() == 0
        assert not lease(kube, ns).get("holderIdentity")  # released on graceful shutdown
    finally:
        first.stop(signal.SIGKILL)
        if second is not None:
            second.stop(signal.SIGKILL)


def test_a_gracefully_stopped_leader_hands_over_at_once(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    ns = kube_namespace
    first = replica(kube, ns)
    second: ControllerProcess | None = None
    try:
        wait_for(lambda: leads(first), what="first replica leads")
        second = replica(kube, ns)
        stopped_at = time.monotonic()
        assert first.stop() == 0
        wait_for(lambda: leads(second), timeout=LEASE_SECONDS * 4, what="standby takes over")
        assert time.monotonic() - stopped_at < LEASE_SECONDS, "release did not shorten hand-over"
    finally:
        first.stop(signal.SIGKILL)
        if second is not None:
            second.stop(signal.SIGKILL)
