"""Helpers shared by the e2e tests: an active PriceBook as the controller would leave it, and
reads of a sandbox's objects."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from finops_devenv import controlplane, sandbox

GROUP = "/apis/finops.stakater.com/v1alpha1"


@contextlib.contextmanager
def active_book(
    kube: controlplane.ControlPlane, name: str, rates: Mapping[str, str]
) -> Iterator[dict[str, Any]]:
    """An annotated `currency` PriceBook marked active and ready (status set as the controller
    would), in a namespace of its own; deleted afterwards, because every controller and job
    elects among all the books of the cluster."""
    ns = f"books-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(ns)
    body = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "PriceBook",
        "metadata": {
            "name": name,
            "namespace": ns,
            "annotations": {"finops.stakater.com/active": "true"},
        },
        "spec": {"currency": "USD", "valuationMode": "currency", "rates": dict(rates)},
    }
    url = f"{GROUP}/namespaces/{ns}/pricebooks"
    with kube.http() as client:
        created = client.post(url, json=body)
        assert created.status_code == 201, created.text
        obj = created.json()
        obj["status"] = {"active": True, "ready": "True"}
        put = client.put(f"{url}/{name}/status", json=obj)
        assert put.status_code == 200, put.text
        try:
            yield put.json()
        finally:
            client.delete(f"{url}/{name}")


def create_allocation_costjob(kube: controlplane.ControlPlane, namespace: str) -> dict[str, Any]:
    """The hourly `ResourceCostCollection` CostJob `allocation-collection` in `namespace`."""
    body = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "CostJob",
        "metadata": {"name": "allocation-collection", "namespace": namespace},
        "spec": {"type": "ResourceCostCollection", "interval": "1h"},
    }
    with kube.http() as client:
        resp = client.post(f"{GROUP}/namespaces/{namespace}/costjobs", json=body)
    assert resp.status_code == 201, resp.text
    created: dict[str, Any] = resp.json()
    return created


def items(svc: sandbox.Services, plural: str) -> list[dict[str, Any]]:
    """Every object of one of our kinds in the sandbox's cluster."""
    with svc.kube.http() as client:
        got: list[dict[str, Any]] = client.get(f"{GROUP}/{plural}").json()["items"]
    return got


def by_name(svc: sandbox.Services, plural: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in items(svc, plural)}


def condition(obj: Mapping[str, Any], kind: str) -> dict[str, Any]:
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((dict(c) for c in conds if c["type"] == kind), {})


def wait_until(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    """Poll with a deadline (never sleep-and-hope)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)
