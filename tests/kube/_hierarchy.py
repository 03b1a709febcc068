"""Offering and Subscription bodies, paths and polls for the controller tests (no tests here).

Objects are created through the real API server, so CRD defaults, validation and pruning
apply; the controller under test runs as a separate process (see test_controller_support).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tests.kube.test_controller_support import FINOPS, get, wait_for

from finops_devenv import controlplane

API_VERSION = "finops.stakater.com/v1alpha1"
FEE = {"period": "1h", "tickAlignment": "ActivatedAt", "priceMicros": 30000000}
NO_WEBHOOKS = {"ENABLE_WEBHOOKS": "false"}


def ref(name: str, namespace: str) -> dict[str, str]:
    return {"name": name, "namespace": namespace}


def offering_body(
    name: str,
    namespace: str,
    *,
    requires: Iterable[str] = (),
    fee: Mapping[str, Any] | None = FEE,
    meters: list[dict[str, Any]] | None = None,
    lifecycle: dict[str, Any] | None = None,
) -> dict[str, Any]:
    pricing: dict[str, Any] = {}
    if fee is not None:
        pricing["subscriptionFee"] = dict(fee)
    if meters is not None:
        pricing["resourcePricing"] = meters
    spec: dict[str, Any] = {"pricing": pricing}
    required = [ref(r, namespace) for r in requires]
    if required:
        spec["compatibility"] = {"requiredOfferings": required}
    if lifecycle is not None:
        spec["lifecycle"] = lifecycle
    return {
        "apiVersion": API_VERSION,
        "kind": "Offering",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def subscription_body(
    name: str,
    namespace: str,
    offering: str,
    *,
    parent: str | None = None,
    lifecycle: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"offeringRef": ref(offering, namespace)}
    if parent is not None:
        spec["parent"] = {"subscriptionRef": ref(parent, namespace)}
    if lifecycle is not None:
        spec["lifecycle"] = lifecycle
    return {
        "apiVersion": API_VERSION,
        "kind": "Subscription",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def path(kind: str, namespace: str, name: str = "") -> str:
    plural = {"Offering": "offerings", "Subscription": "subscriptions", "PriceBook": "pricebooks"}
    base = f"{FINOPS}/namespaces/{namespace}/{plural[kind]}"
    return f"{base}/{name}" if name else base


def fetch(kube: controlplane.ControlPlane, kind: str, namespace: str, name: str) -> dict[str, Any]:
    return get(kube, path(kind, namespace, name)) or {}


def condition(obj: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == type_:
            return dict(cond)
    return None


def reason(obj: Mapping[str, Any], type_: str) -> str | None:
    found = condition(obj, type_)
    return None if found is None else str(found["reason"])


def wait_reason(
    kube: controlplane.ControlPlane,
    kind: str,
    namespace: str,
    name: str,
    type_: str,
    expected: str,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Poll until the object's `type_` condition carries `expected`; returns the object."""

    def probe() -> dict[str, Any] | None:
        obj = fetch(kube, kind, namespace, name)
        return obj if reason(obj, type_) == expected else None

    return wait_for(probe, timeout=timeout, what=f"{kind} {name} {type_}={expected}")


def strip_finalizers(kube: controlplane.ControlPlane, kind: str, namespace: str, name: str) -> None:
    """What the charge job does once a Subscription is settled: let the object go."""
    with kube.http() as client:
        resp = client.patch(
            path(kind, namespace, name),
            json={"metadata": {"finalizers": None}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
    assert resp.status_code in (200, 404), resp.text


def gone(kube: controlplane.ControlPlane, kind: str, namespace: str, name: str) -> bool:
    return get(kube, path(kind, namespace, name)) is None
