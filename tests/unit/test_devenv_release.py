"""When the real-node sandbox and the cluster tier call a cluster settled: a Deployment restarted
a moment ago still has its old pod Running beside a new one that is not ready yet."""

from __future__ import annotations

import signal
from typing import Any

from finops_devenv import realnode, release


def deployment(generation: int = 2, **status: int) -> dict[str, Any]:
    return {"metadata": {"generation": generation}, "spec": {"replicas": 1}, "status": status}


def pod(phase: str, ready: bool = True, deleting: bool = False) -> dict[str, Any]:
    meta = {"deletionTimestamp": "2026-12-06T15:18:35Z"} if deleting else {}
    cond = {"type": "Ready", "status": "True" if ready else "False"}
    return {"metadata": meta, "status": {"phase": phase, "conditions": [cond]}}


DONE = {"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1}


def test_a_deployment_is_rolled_out_only_when_no_old_pod_is_counted_and_the_new_is_available() -> (
    None
):
    assert release.rolled_out(deployment(**DONE))
    # the restart patched the template; the Deployment controller has not seen it yet
    assert not release.rolled_out(deployment(**{**DONE, "observedGeneration": 1}))
    # the new pod exists but is not ready: the old one still serves
    assert not release.rolled_out(deployment(**{**DONE, "replicas": 2, "availableReplicas": 1}))
    assert not release.rolled_out(deployment(**{**DONE, "availableReplicas": 0}))
    assert not release.rolled_out({"metadata": {"generation": 1}, "spec": {"replicas": 1}})


def test_a_pod_is_settled_when_succeeded_or_running_and_ready_and_not_deleting() -> None:
    assert release.pod_settled(pod("Running"))
    assert release.pod_settled(pod("Succeeded", ready=False))
    assert not release.pod_settled(pod("Running", ready=False))
    assert not release.pod_settled(pod("Running", deleting=True))
    assert not release.pod_settled(pod("Pending", ready=False))
    assert not release.pod_settled(pod("Failed", ready=False))


def test_a_cluster_teardown_holds_off_a_second_ctrl_c_and_restores_the_handlers() -> None:
    before = signal.getsignal(signal.SIGINT)
    with realnode._uninterruptible():
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        signal.raise_signal(signal.SIGINT)  # ignored: the block goes on
    assert signal.getsignal(signal.SIGINT) is before


def test_only_a_pass_or_a_webhook_denial_counts_as_the_webhooks_answering() -> None:
    assert release.webhook_answered(0, "offering.finops.stakater.com/shop created (server dry run)")
    denied = (
        'Error from server (Forbidden): error when creating "STDIN": admission webhook'
        ' "voffering-v1alpha1.kb.io" denied the request: spec.price: Required value'
    )
    assert release.webhook_answered(1, denied)
    unreachable = (
        'Error from server (InternalError): error when creating "STDIN": Internal error'
        ' occurred: failed calling webhook "voffering-v1alpha1.kb.io": failed to call webhook:'
        ' Post "https://finops-webhook-service.finops.svc:443/validate": dial tcp'
        " 10.96.0.12:443: connect: connection refused"
    )
    assert not release.webhook_answered(1, unreachable)
    refused = (
        "The connection to the server 127.0.0.1:6443 was refused"
        " - did you specify the right host or port?"
    )
    assert not release.webhook_answered(1, refused)
    unserved = 'error: resource mapping not found for name: "shop" namespace: "finops" from "STDIN"'
    assert not release.webhook_answered(1, unserved)
