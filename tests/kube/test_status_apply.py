"""The one status path on a real API server: changes applied to a read, unchanged skipped,
a stale read retried from a fresh one (or raised when the caller requeues instead)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Mapping
from typing import Any

import lightkube
import pytest
from lightkube.config.kubeconfig import KubeConfig
from tests.kube.test_controller_support import FINOPS, create, get, merge_patch

from finops.api import conditions
from finops.kube import resources, status
from finops_devenv import controlplane

NOW = dt.datetime(2026, 4, 1, 12, tzinfo=dt.UTC)


def costjob(kube: controlplane.ControlPlane, ns: str, name: str) -> dict[str, Any]:
    body = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "CostJob",
        "metadata": {"name": name},
        "spec": {"interval": "1h"},
    }
    return create(kube, f"{FINOPS}/namespaces/{ns}/costjobs", body)


def apply(
    kube: controlplane.ControlPlane,
    ns: str,
    name: str,
    changes: list[status.Change],
    **kwargs: Any,
) -> status.Applied:
    async def go() -> status.Applied:
        client = lightkube.AsyncClient(config=KubeConfig.from_file(str(kube.kubeconfig)))
        try:
            return await status.apply(
                client, resources.CostJob, name, changes, namespace=ns, **kwargs
            )
        finally:
            await client.close()

    return asyncio.run(go())


def count_calls(change: status.Change, calls: list[str]) -> status.Change:
    def counted(obj: Mapping[str, Any]) -> Mapping[str, Any]:
        calls.append(str(obj["metadata"]["resourceVersion"]))
        return change(obj)

    return counted


def test_a_stale_read_is_retried_from_a_fresh_one_and_keeps_the_other_writers_field(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    stale = costjob(kube, kube_namespace, "stale")
    path = f"{FINOPS}/namespaces/{kube_namespace}/costjobs/stale/status"
    merge_patch(kube, path, {"status": {"lastExecutionStatus": "Success"}})
    calls: list[str] = []
    ready = conditions.DecidedCondition("Scheduled", "True", "CronJobReady", "ok")
    done = apply(
        kube,
        kube_namespace,
        "stale",
        [count_calls(status.set_condition(ready, NOW), calls)],
        observed=stale,
    )
    assert done.written and len(calls) == 2 and calls[0] != calls[1]
    stored = get(kube, f"{FINOPS}/namespaces/{kube_namespace}/costjobs/stale")
    assert stored is not None
    assert stored["status"]["lastExecutionStatus"] == "Success"
    assert [c["reason"] for c in stored["status"]["conditions"]] == ["CronJobReady"]


def test_nothing_is_written_when_the_changes_leave_the_status_as_it_was(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    costjob(kube, kube_namespace, "same")
    fields = status.set_fields({"lastExecutionStatus": "Failed"})
    first = apply(kube, kube_namespace, "same", [fields])
    again = apply(kube, kube_namespace, "same", [fields])
    assert first.written and not again.written
    assert first.obj is not None and again.obj is not None
    assert again.obj["metadata"]["resourceVersion"] == first.obj["metadata"]["resourceVersion"]


def test_a_caller_that_requeues_gets_the_conflict(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    stale = costjob(kube, kube_namespace, "requeue")
    path = f"{FINOPS}/namespaces/{kube_namespace}/costjobs/requeue/status"
    merge_patch(kube, path, {"status": {"lastExecutionStatus": "Success"}})
    with pytest.raises(lightkube.ApiError) as caught:
        apply(
            kube,
            kube_namespace,
            "requeue",
            [status.replace({"lastExecutionStatus": "Failed"})],
            observed=stale,
            attempts=1,
        )
    assert caught.value.status.code == 409


def test_a_missing_object_is_reported_as_gone(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    done = apply(kube, kube_namespace, "absent", [status.set_fields({"x": 1})])
    assert done == status.Applied(None, False)
