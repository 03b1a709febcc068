"""Offering reconciler on a real API server, the controller running as a process.

Pricing depends on the cluster-wide PriceBook election, so every test here starts and ends
with no PriceBooks at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.kube import _hierarchy as h
from tests.kube.test_controller_support import (
    ControllerProcess,
    create,
    delete,
    delete_all_pricebooks,
    events_for,
    merge_patch,
    running_controller,
    wait_for,
    wait_more_reconciles,
)

from finops_devenv import controlplane

METERS: list[dict[str, Any]] = [
    {"name": "cpuHour", "margins": {"factorMilli": 1500}},
    {"name": "ramGbHour"},
]


@pytest.fixture
def controller(kube: controlplane.ControlPlane, kube_namespace: str) -> Iterator[ControllerProcess]:
    delete_all_pricebooks(kube)
    with running_controller(kube, kube_namespace, env=dict(h.NO_WEBHOOKS)) as proc:
        yield proc
    delete_all_pricebooks(kube)


def book(name: str, rates: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": h.API_VERSION,
        "kind": "PriceBook",
        "metadata": {"name": name},
        "spec": {"currency": "USD", "valuationMode": "currency", "rates": rates},
    }


def ready_pair_agrees(obj: dict[str, Any]) -> bool:
    ready, pricing = h.condition(obj, "Ready"), h.condition(obj, "PricingResolved")
    assert ready is not None and pricing is not None
    assert ready["status"] == pricing["status"] == obj["status"]["ready"]
    assert ready["message"] == pricing["message"]
    if ready["status"] == "False":
        assert ready["reason"] == pricing["reason"]
    else:
        assert (ready["reason"], pricing["reason"]) == ("ValidationSucceeded", "PricingResolved")
    return True


class TestReadiness:
    def test_a_fee_only_offering_resolves_without_a_book_and_carries_our_finalizer(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        create(kube, h.path("Offering", ns), h.offering_body("basic", ns))
        obj = h.wait_reason(kube, "Offering", ns, "basic", "PricingResolved", "PricingResolved")
        assert ready_pair_agrees(obj)
        assert obj["metadata"]["finalizers"] == ["offerings.finops.stakater.com/finalizer"]
        pricing = obj["status"]["resolvedPricing"]
        assert pricing["subscriptionFee"] == h.FEE
        assert pricing["resolvedAt"]

    def test_a_missing_requirement_holds_it_until_the_requirement_is_created(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        create(kube, h.path("Offering", ns), h.offering_body("disk", ns, requires=["vm"]))
        obj = h.wait_reason(kube, "Offering", ns, "disk", "Ready", "RequiredOfferingNotFound")
        assert ready_pair_agrees(obj)
        assert f"{ns}/vm" in h.condition(obj, "Ready")["message"]  # type: ignore[index]
        create(kube, h.path("Offering", ns), h.offering_body("vm", ns))
        obj = h.wait_reason(kube, "Offering", ns, "disk", "Ready", "ValidationSucceeded")
        assert ready_pair_agrees(obj) and obj["status"]["ready"] == "True"

    def test_a_requirement_that_is_not_ready_holds_it_and_both_recover_together(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        create(kube, h.path("Offering", ns), h.offering_body("middle", ns, requires=["base"]))
        create(kube, h.path("Offering", ns), h.offering_body("top", ns, requires=["middle"]))
        h.wait_reason(kube, "Offering", ns, "middle", "Ready", "RequiredOfferingNotFound")
        obj = h.wait_reason(kube, "Offering", ns, "top", "Ready", "RequiredOfferingNotReady")
        assert ready_pair_agrees(obj)
        assert f"{ns}/middle" in h.condition(obj, "Ready")["message"]  # type: ignore[index]
        create(kube, h.path("Offering", ns), h.offering_body("base", ns))
        for name in ("middle", "top"):
            h.wait_reason(kube, "Offering", ns, name, "Ready", "ValidationSucceeded")

    def test_a_requirement_cycle_is_reported_with_its_path_on_every_member(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        create(kube, h.path("Offering", ns), h.offering_body("alpha", ns, requires=["beta"]))
        create(kube, h.path("Offering", ns), h.offering_body("beta", ns, requires=["alpha"]))
        alpha = h.wait_reason(kube, "Offering", ns, "alpha", "Ready", "CircularDependencyDetected")
        beta = h.wait_reason(kube, "Offering", ns, "beta", "Ready", "CircularDependencyDetected")
        assert ready_pair_agrees(alpha) and ready_pair_agrees(beta)
        assert h.condition(alpha, "Ready")["message"] == (  # type: ignore[index]
            f"circular dependency detected: {ns}/alpha -> {ns}/beta -> {ns}/alpha"
        )
        assert f"{ns}/beta -> {ns}/alpha -> {ns}/beta" in h.condition(beta, "Ready")["message"]  # type: ignore[index]


class TestPricing:
    def test_metered_pricing_waits_for_a_book_and_resolves_on_its_own_when_one_is_active(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        create(kube, h.path("Offering", ns), h.offering_body("metered", ns, meters=METERS))
        obj = h.wait_reason(kube, "Offering", ns, "metered", "Ready", "NoActivePricebook")
        assert ready_pair_agrees(obj) and "resolvedPricing" not in obj["status"]
        create(kube, h.path("PriceBook", ns), book("prices", {"cpuHour": "0.04"}))
        obj = h.wait_reason(kube, "Offering", ns, "metered", "Ready", "ValidationSucceeded")
        assert ready_pair_agrees(obj)
        meters = {m["name"]: m for m in obj["status"]["resolvedPricing"]["meters"]}
        assert meters["cpuHour"]["unitPriceMicros"] == 60000  # 0.04 USD x 1.5
        assert meters["ramGbHour"]["unitPriceMicros"] == 0  # no rate in the book
        assert obj["status"]["resolvedPricing"]["subscriptionFee"] == h.FEE

    def test_a_rate_the_book_cannot_parse_holds_the_offering(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        create(kube, h.path("PriceBook", ns), book("typo", {"ramGbHour": "0.0000001"}))
        create(kube, h.path("Offering", ns), h.offering_body("metered", ns, meters=METERS))
        obj = h.wait_reason(kube, "Offering", ns, "metered", "Ready", "PricebookParseFailed")
        assert ready_pair_agrees(obj) and "resolvedPricing" not in obj["status"]

    def test_resolved_pricing_is_kept_after_the_book_changes_its_rate(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        create(kube, h.path("PriceBook", ns), book("prices", {"cpuHour": "0.04"}))
        create(kube, h.path("Offering", ns), h.offering_body("early", ns, meters=METERS))
        early = h.wait_reason(kube, "Offering", ns, "early", "Ready", "ValidationSucceeded")
        merge_patch(
            kube, h.path("PriceBook", ns, "prices"), {"spec": {"rates": {"cpuHour": "0.1"}}}
        )
        # A later Offering sees the new rate, so the controller has seen the change ...
        create(kube, h.path("Offering", ns), h.offering_body("late", ns, meters=METERS))
        late = h.wait_reason(kube, "Offering", ns, "late", "Ready", "ValidationSucceeded")
        assert late["status"]["resolvedPricing"]["meters"][0]["unitPriceMicros"] == 150000
        # ... and after another full resync the early one still shows what it published.
        wait_more_reconciles(controller, "offering", count=4)
        now = h.fetch(kube, "Offering", ns, "early")
        assert now["status"]["resolvedPricing"] == early["status"]["resolvedPricing"]
        assert now["status"]["resolvedPricing"]["meters"][0]["unitPriceMicros"] == 60000


class TestDeletionGuard:
    def test_a_winding_down_subscription_blocks_deletion_until_it_is_gone(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        create(kube, h.path("Offering", ns), h.offering_body("vm", ns))
        h.wait_reason(kube, "Offering", ns, "vm", "Ready", "ValidationSucceeded")
        create(kube, h.path("Subscription", ns), h.subscription_body("acme", ns, "vm"))
        h.wait_reason(kube, "Subscription", ns, "acme", "Active", "ActivationSucceeded")

        delete(kube, h.path("Offering", ns, "vm"))
        obj = h.wait_reason(kube, "Offering", ns, "vm", "Deleting", "DependentSubscriptionsExist")
        deleting = h.condition(obj, "Deleting")
        assert deleting is not None and deleting["status"] == "False"
        assert f"still referenced by subscriptions: {ns}/acme" in deleting["message"]
        blocked = wait_for(
            lambda: [e for e in events_for(kube, ns, "vm") if e["reason"] == "DeletionBlocked"],
            what="DeletionBlocked event",
        )
        assert blocked[0]["type"] == "Warning" and f"{ns}/acme" in blocked[0]["message"]

        # The Subscription winds down (deactivated, finalizer kept): still a dependent.
        delete(kube, h.path("Subscription", ns, "acme"))
        h.wait_reason(kube, "Subscription", ns, "acme", "Active", "MarkedForDeletion")
        wait_more_reconciles(controller, "offering", count=3)
        assert not h.gone(kube, "Offering", ns, "vm")
        obj = h.fetch(kube, "Offering", ns, "vm")
        assert h.reason(obj, "Deleting") == "DependentSubscriptionsExist"

        # The charge job releases the Subscription: now the Offering may go.
        h.strip_finalizers(kube, "Subscription", ns, "acme")
        wait_for(lambda: h.gone(kube, "Offering", ns, "vm"), what="offering released")

    def test_a_requiring_offering_blocks_deletion_until_it_is_deleted_too(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        create(kube, h.path("Offering", ns), h.offering_body("vm", ns))
        create(kube, h.path("Offering", ns), h.offering_body("disk", ns, requires=["vm"]))
        h.wait_reason(kube, "Offering", ns, "disk", "Ready", "ValidationSucceeded")
        delete(kube, h.path("Offering", ns, "vm"))
        obj = h.wait_reason(kube, "Offering", ns, "vm", "Deleting", "DependentOfferingsExist")
        assert f"still required by dependent resources: {ns}/disk" in (
            h.condition(obj, "Deleting") or {}
        ).get("message", "")
        delete(kube, h.path("Offering", ns, "disk"))
        wait_for(lambda: h.gone(kube, "Offering", ns, "disk"), what="disk released")
        wait_for(lambda: h.gone(kube, "Offering", ns, "vm"), what="vm released")

    def test_an_unreferenced_offering_is_released_at_once(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        create(kube, h.path("Offering", ns), h.offering_body("lonely", ns))
        wait_for(
            lambda: h.fetch(kube, "Offering", ns, "lonely")["metadata"].get("finalizers"),
            what="finalizer",
        )
        delete(kube, h.path("Offering", ns, "lonely"))
        wait_for(lambda: h.gone(kube, "Offering", ns, "lonely"), what="released")
