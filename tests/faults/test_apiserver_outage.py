"""The API server goes away for 30 s under a running, leader-elected controller (issue #16, 4).

Two kinds of outage, on a control plane of this module's own (the session's is left alone):
- `stopped`: kube-apiserver is stopped (connections refused) and started again after 30 s on
  the same port, with the same certificates and the same etcd, so no data is lost;
- `frozen`: kube-apiserver is sent SIGSTOP and, 30 s later, SIGCONT (connections hang).

Invariant with one replica: the controller survives without a restart (same pid, never
exits), keeps its Lease (same holder identity, no extra leaseTransitions, renewals resume),
reconciles a change made after the outage, and records no duplicate Events (each
object/reason once). With a standby and a leader frozen through the outage: the Lease is
handed over cleanly (see that test).
"""

from __future__ import annotations

import collections
import os
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tests.fixtures.kube import CRD_DIR
from tests.kube.test_controller_support import FINOPS, ControllerProcess, create, get, wait_for

from finops.kube import leader
from finops_devenv import controlplane

OUTAGE_SECONDS = 30.0
RECOVERY_TIMEOUT = 150.0  # safety net: watches back off up to 30 s between relists


@pytest.fixture(scope="module")
def own_kube() -> Iterator[controlplane.ControlPlane]:
    """A control plane only this module stops and freezes."""
    with controlplane.running(CRD_DIR) as cp:
        yield cp


def lease(kube: controlplane.ControlPlane, ns: str) -> dict[str, Any]:
    obj = get(kube, f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{leader.ELECTION_ID}")
    return dict((obj or {}).get("spec") or {})


def new_costjob(kube: controlplane.ControlPlane, ns: str, name: str) -> None:
    body = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "CostJob",
        "metadata": {"name": name},
        "spec": {"interval": "1h"},
    }
    create(kube, f"{FINOPS}/namespaces/{ns}/costjobs", body)


def has_cronjob(kube: controlplane.ControlPlane, ns: str, name: str) -> bool:
    return get(kube, f"/apis/batch/v1/namespaces/{ns}/cronjobs/{name}-cronjob") is not None


def event_counts(kube: controlplane.ControlPlane, *namespaces: str) -> collections.Counter[str]:
    """How many Event objects each `namespace/object: reason` has."""
    counts: collections.Counter[str] = collections.Counter()
    for ns in namespaces:
        for event in (get(kube, f"/api/v1/namespaces/{ns}/events") or {}).get("items", []):
            counts[f"{ns}/{event['involvedObject']['name']}: {event['reason']}"] += 1
    return counts


def outage(kube: controlplane.ControlPlane, mode: str) -> None:
    if mode == "stopped":
        kube.stop_apiserver()
        time.sleep(OUTAGE_SECONDS)
        kube.start_apiserver()
    else:
        pid = kube.apiserver_pid()
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(OUTAGE_SECONDS)
        finally:
            os.kill(pid, signal.SIGCONT)


@pytest.mark.parametrize("mode", ["stopped", "frozen"])
def test_the_controller_rides_out_a_30s_api_server_outage_without_a_restart(
    own_kube: controlplane.ControlPlane, mode: str
) -> None:
    kube = own_kube
    ns, elsewhere = f"f-{uuid.uuid4().hex[:8]}", f"f-{uuid.uuid4().hex[:8]}"
    for name in (ns, elsewhere):
        kube.create_namespace(name)
    proc = ControllerProcess(kube, namespace=ns, args=["--leader-elect"]).start()
    assert proc.proc is not None
    try:
        wait_for(lambda: "became leader" in proc.logs(), what="the controller leads")
        new_costjob(kube, ns, "before")
        new_costjob(kube, elsewhere, "refused")  # not an allowed namespace: one Warning Event
        wait_for(lambda: has_cronjob(kube, ns, "before"), what="CronJob of 'before'")
        wait_for(lambda: len(event_counts(kube, ns, elsewhere)) >= 2, what="the first Events")
        held = lease(kube, ns)
        pid = proc.proc.pid

        started = time.monotonic()
        outage(kube, mode)
        ended = time.monotonic()  # the API server answers again
        assert proc.proc.poll() is None, f"the controller exited during the outage:\n{proc.logs()}"

        # Renewals resume under the same identity, with no hand-over counted.
        wait_for(
            lambda: lease(kube, ns).get("renewTime", "") > held["renewTime"],
            timeout=RECOVERY_TIMEOUT,
            what="a lease renewal after the outage",
        )
        after = lease(kube, ns)
        assert after["holderIdentity"] == held["holderIdentity"]
        assert after.get("leaseTransitions", 0) == held.get("leaseTransitions", 0)

        # A change made after the outage is reconciled by the same process.
        new_costjob(kube, ns, "after")
        wait_for(
            lambda: has_cronjob(kube, ns, "after"),
            timeout=RECOVERY_TIMEOUT,
            what="the CronJob of a CostJob created after the outage",
        )
        recovered = time.monotonic() - ended
        assert proc.proc.poll() is None and proc.proc.pid == pid
        logs = proc.logs()
        assert logs.count("became leader") == 1, "the controller must not have re-elected"
        # 30 s is past the renew deadline (10 s): work paused, then resumed on renewal.
        assert "pausing work" in logs and "resuming work" in logs

        time.sleep(5)  # a few resyncs (every 3 s) to show any duplicate Event
        counts = event_counts(kube, ns, elsewhere)
        duplicates = {key: n for key, n in counts.items() if n > 1}
        assert not duplicates, f"duplicate Events: {duplicates}"
        assert counts[f"{ns}/before: CronJobCreated"] == 1
        assert counts[f"{ns}/after: CronJobCreated"] == 1
        assert sum(counts.values()) <= 4, counts
        print(
            f"apiserver outage ({mode}): down {ended - started:.1f}s, a new change reconciled "
            f"{recovered:.1f}s after it answered again, events {dict(counts)}"
        )
    finally:
        code = proc.stop()
        print(proc.logs()[-4000:])
    assert code == 0, "a graceful stop after the outage exits 0"


def test_a_standby_takes_over_cleanly_when_the_leader_is_gone_through_the_outage(
    own_kube: controlplane.ControlPlane,
) -> None:
    """Leader and standby both lose the API server for 30 s (stopped, then restarted); the
    leader is also frozen (SIGSTOP) until the standby has taken the Lease, then thawed.

    Invariant: the standby takes over (one more leaseTransition), reconciles a new change, the
    thawed old leader sees the new holder and exits 1 to come back as a standby, and no
    Event is recorded twice (the new leader does not announce the old one's refusals again).
    """
    kube = own_kube
    ns, elsewhere = f"f-{uuid.uuid4().hex[:8]}", f"f-{uuid.uuid4().hex[:8]}"
    for name in (ns, elsewhere):
        kube.create_namespace(name)
    first = ControllerProcess(kube, namespace=ns, args=["--leader-elect"]).start()
    second: ControllerProcess | None = None
    try:
        wait_for(lambda: "became leader" in first.logs(), what="the first replica leads")
        second = ControllerProcess(kube, namespace=ns, args=["--leader-elect"]).start()
        new_costjob(kube, ns, "before")
        new_costjob(kube, elsewhere, "refused")
        wait_for(lambda: has_cronjob(kube, ns, "before"), what="CronJob of 'before'")
        wait_for(lambda: len(event_counts(kube, ns, elsewhere)) >= 2, what="the first Events")
        held = lease(kube, ns)
        assert first.proc is not None and second.proc is not None

        first.proc.send_signal(signal.SIGSTOP)
        try:
            outage(kube, "stopped")
            wait_for(
                lambda: "became leader" in second.logs(),
                timeout=RECOVERY_TIMEOUT,
                what="the standby takes the Lease",
            )
            new_costjob(kube, ns, "after")
            wait_for(lambda: has_cronjob(kube, ns, "after"), timeout=60, what="'after'")
        finally:
            first.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: first.proc.poll() is not None, what="the old leader exits")
        assert first.proc.returncode == 1 and "another replica leads now" in first.logs()
        after = lease(kube, ns)
        assert after["holderIdentity"] != held["holderIdentity"]
        assert after.get("leaseTransitions", 0) == held.get("leaseTransitions", 0) + 1
        assert second.proc.poll() is None

        time.sleep(5)  # a few resyncs (every 3 s) to show any duplicate Event
        counts = event_counts(kube, ns, elsewhere)
        duplicates = {key: n for key, n in counts.items() if n > 1}
        assert not duplicates, f"duplicate Events after the hand-over: {duplicates}"
        assert counts[f"{ns}/after: CronJobCreated"] == 1
        print(f"apiserver outage with a frozen leader: handed over, events {dict(counts)}")
    finally:
        first.stop(signal.SIGKILL)
        if second is not None:
            second.stop(signal.SIGKILL)
