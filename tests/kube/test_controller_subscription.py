"""Subscription reconciler on a real API server, the controller running as a process.

Each test gets its own namespace; Offerings are fee-only, so they resolve without a PriceBook.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import yaml
from tests.kube import _hierarchy as h
from tests.kube.test_controller_support import (
    ControllerProcess,
    create,
    delete,
    events_for,
    reconciles,
    running_controller,
    wait_for,
    wait_more_reconciles,
)

from finops_devenv import controlplane

SUBSCRIPTIONS = "subscription"


@pytest.fixture(scope="module")
def controller(kube: controlplane.ControlPlane) -> Iterator[ControllerProcess]:
    home = f"ctl-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(home)
    env = {**h.NO_WEBHOOKS, "FINOPS_RESYNC_SECONDS": "2"}
    with running_controller(kube, home, env=env) as proc:
        yield proc


def offerings(
    kube: controlplane.ControlPlane, ns: str, specs: Mapping[str, Mapping[str, Any]]
) -> None:
    """Create Offerings ({name: offering_body kwargs}) and wait until each is ready."""
    for name, kwargs in specs.items():
        create(kube, h.path("Offering", ns), h.offering_body(name, ns, **kwargs))
    for name in specs:
        h.wait_reason(kube, "Offering", ns, name, "Ready", "ValidationSucceeded")


def subscribe(
    kube: controlplane.ControlPlane, ns: str, name: str, offering: str, **kwargs: Any
) -> None:
    create(kube, h.path("Subscription", ns), h.subscription_body(name, ns, offering, **kwargs))


def ready(kube: controlplane.ControlPlane, ns: str, name: str, reason: str) -> dict[str, Any]:
    return h.wait_reason(kube, "Subscription", ns, name, "Ready", reason)


def active(kube: controlplane.ControlPlane, ns: str, name: str, reason: str) -> dict[str, Any]:
    return h.wait_reason(kube, "Subscription", ns, name, "Active", reason)


def message(obj: Mapping[str, Any], type_: str) -> str:
    return str((h.condition(obj, type_) or {}).get("message", ""))


def configmap(kube: controlplane.ControlPlane, ns: str, name: str) -> None:
    create(
        kube,
        f"/api/v1/namespaces/{ns}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}},
    )


def target(name: str, ns: str, kind: str = "ConfigMap", api_version: str = "v1") -> dict[str, Any]:
    return {"targetRef": {"apiVersion": api_version, "kind": kind, "name": name, "namespace": ns}}


def apply(kube: controlplane.ControlPlane, body: dict[str, Any]) -> None:
    """Server-side apply, as `kubectl apply --server-side` sends it."""
    meta = body["metadata"]
    with kube.http() as client:
        resp = client.patch(
            h.path(body["kind"], meta["namespace"], meta["name"]),
            params={"fieldManager": "kubectl", "force": "true"},
            content=yaml.safe_dump(body),
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
    assert resp.status_code in (200, 201), resp.text


class TestActivation:
    def test_an_offering_created_later_lets_the_subscription_activate_once(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        subscribe(kube, ns, "acme", "basic")
        held = ready(kube, ns, "acme", "OfferingNotFound")
        assert held["status"]["ready"] == "False" and "activatedAt" not in held["status"]
        assert f"{ns}/basic" in message(held, "Ready")
        offerings(kube, ns, {"basic": {}})
        obj = active(kube, ns, "acme", "ActivationSucceeded")
        st = obj["status"]
        assert st["ready"] == "True" and st["activatedAt"]
        assert h.reason(obj, "Ready") == "ActivationSucceeded"
        assert st["compatibilityRoot"] == obj["metadata"]["uid"]
        assert obj["metadata"]["finalizers"] == ["subscriptions.finops.stakater.com/finalizer"]
        activated = wait_for(
            lambda: [e for e in events_for(kube, ns, "acme") if e["reason"] == "Activated"],
            what="Activated event",
        )
        assert len(activated) == 1 and activated[0]["type"] == "Normal"
        wait_more_reconciles(controller, SUBSCRIPTIONS, count=3)
        assert (
            h.fetch(kube, "Subscription", ns, "acme")["status"]["activatedAt"] == st["activatedAt"]
        )

    def test_an_offering_that_is_not_ready_holds_the_subscription(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        offerings(kube, ns, {"core": {}})
        create(kube, h.path("Offering", ns), h.offering_body("disk", ns, requires=["vm"]))
        subscribe(kube, ns, "bundle", "core")
        subscribe(kube, ns, "disk", "disk", parent="bundle")
        subscribe(kube, ns, "vm", "vm", parent="bundle")
        obj = ready(kube, ns, "disk", "OfferingNotReady")
        assert f"{ns}/disk" in message(obj, "Ready")
        ready(kube, ns, "vm", "OfferingNotFound")
        offerings(kube, ns, {"vm": {}})  # readies disk's Offering, then vm covers disk
        active(kube, ns, "disk", "ActivationSucceeded")


class TestParentGate:
    def test_a_missing_parent_holds_the_child_until_it_is_created(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        offerings(kube, ns, {"core": {}, "vm": {}})
        subscribe(kube, ns, "child", "vm", parent="root")
        obj = ready(kube, ns, "child", "ParentSubscriptionNotFound")
        assert "compatibilityRoot" not in obj["status"]
        subscribe(kube, ns, "root", "core")
        child = active(kube, ns, "child", "ActivationSucceeded")
        root = h.fetch(kube, "Subscription", ns, "root")
        assert child["status"]["compatibilityRoot"] == root["metadata"]["uid"]

    def test_a_parent_that_is_not_ready_holds_the_child(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        offerings(kube, ns, {"vm": {}})
        subscribe(kube, ns, "root", "core")  # its Offering does not exist yet
        subscribe(kube, ns, "child", "vm", parent="root")
        ready(kube, ns, "root", "OfferingNotFound")
        obj = ready(kube, ns, "child", "ParentSubscriptionNotReady")
        assert f"{ns}/root" in message(obj, "Ready")
        offerings(kube, ns, {"core": {}})
        active(kube, ns, "child", "ActivationSucceeded")

    def test_a_deactivated_parent_holds_a_child_that_never_activated(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        offerings(kube, ns, {"core": {}})
        subscribe(kube, ns, "root", "core")
        active(kube, ns, "root", "ActivationSucceeded")
        delete(kube, h.path("Subscription", ns, "root"))
        active(kube, ns, "root", "MarkedForDeletion")
        subscribe(kube, ns, "late", "vm", parent="root")  # its Offering is ready below
        offerings(kube, ns, {"vm": {}})
        obj = ready(kube, ns, "late", "ParentSubscriptionDeactivated")
        assert "activatedAt" not in obj["status"]

    def test_a_subscription_naming_itself_as_parent_is_a_cycle(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        offerings(kube, ns, {"core": {}})
        subscribe(kube, ns, "ouroboros", "core", parent="ouroboros")
        obj = ready(kube, ns, "ouroboros", "CircularDependencyDetected")
        assert f"{ns}/ouroboros" in message(obj, "Ready")


class TestCompatibilityGate:
    def test_an_uncovered_requirement_holds_until_a_relative_covers_it(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        offerings(kube, ns, {"core": {}, "vm": {}, "disk": {"requires": ["vm"]}})
        subscribe(kube, ns, "bundle", "core")
        subscribe(kube, ns, "disk", "disk", parent="bundle")
        obj = ready(kube, ns, "disk", "CompatibilityRequirementNotMet")
        assert message(obj, "Ready") == (
            f"required offering {ns}/vm not covered by an active subscription in the family"
        )
        assert obj["status"]["compatibilityRoot"]  # stamped once past the parent gate
        subscribe(kube, ns, "vm", "vm", parent="bundle")
        active(kube, ns, "disk", "ActivationSucceeded")

    def test_a_descendant_never_covers_its_ancestor(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        offerings(kube, ns, {"core": {}, "vm": {}, "disk": {"requires": ["vm"]}})
        subscribe(kube, ns, "bundle", "core")
        subscribe(kube, ns, "disk", "disk", parent="bundle")
        subscribe(kube, ns, "vm-below", "vm", parent="disk")
        ready(kube, ns, "disk", "CompatibilityRequirementNotMet")
        wait_more_reconciles(controller, SUBSCRIPTIONS, count=5)
        obj = h.fetch(kube, "Subscription", ns, "disk")
        assert h.reason(obj, "Ready") == "CompatibilityRequirementNotMet"
        assert h.reason(h.fetch(kube, "Subscription", ns, "vm-below"), "Ready") == (
            "ParentSubscriptionNotReady"
        )


class TestTargetGate:
    def test_a_missing_target_holds_then_activates_and_its_deletion_ends_billing(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        offerings(kube, ns, {"vm": {}})
        subscribe(kube, ns, "acme", "vm", lifecycle=target("vm-1", ns))
        obj = ready(kube, ns, "acme", "TargetNotFound")
        assert "v1 ConfigMap" in message(obj, "Ready") and "vm-1" in message(obj, "Ready")
        configmap(kube, ns, "vm-1")  # not watched: found by the periodic recheck
        active(kube, ns, "acme", "ActivationSucceeded")
        delete(kube, f"/api/v1/namespaces/{ns}/configmaps/vm-1")
        obj = active(kube, ns, "acme", "TargetNotFound")
        assert obj["status"]["deactivatedAt"]
        assert h.reason(obj, "Ready") == "ValidationSucceeded"
        deactivated = wait_for(
            lambda: [e for e in events_for(kube, ns, "acme") if e["reason"] == "Deactivated"],
            what="Deactivated event",
        )
        assert deactivated[0]["type"] == "Warning"
        assert deactivated[0]["message"].startswith("TargetNotFound: ")
        configmap(kube, ns, "vm-1")  # terminal: the target coming back revives nothing
        wait_more_reconciles(controller, SUBSCRIPTIONS, count=5)
        assert h.reason(h.fetch(kube, "Subscription", ns, "acme"), "Active") == "TargetNotFound"

    def test_targets_of_any_kind_are_found_through_discovery(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        offerings(kube, ns, {"vm": {}})
        subscribe(
            kube, ns, "on-namespace", "vm", lifecycle=target(ns, "", "Namespace")
        )  # cluster-scoped
        subscribe(
            kube,
            ns,
            "on-offering",
            "vm",
            lifecycle=target("vm", ns, "Offering", "finops.stakater.com/v1alpha1"),
        )
        subscribe(kube, ns, "on-nothing", "vm", lifecycle=target("x", ns, "NoSuchKind"))
        active(kube, ns, "on-namespace", "ActivationSucceeded")
        active(kube, ns, "on-offering", "ActivationSucceeded")
        ready(kube, ns, "on-nothing", "TargetNotFound")

    def test_a_target_naming_the_subscription_itself_is_refused(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        offerings(kube, ns, {"vm": {}})
        me = target("mirror", ns, "Subscription", "finops.stakater.com/v1alpha1")
        subscribe(kube, ns, "mirror", "vm", lifecycle=me)
        obj = ready(kube, ns, "mirror", "TargetIsSelfReference")
        assert "activatedAt" not in obj["status"]


class TestCascades:
    def test_under_deactivate_a_parent_ending_ends_its_children(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        offerings(kube, ns, {"core": {}, "vm": {}})
        subscribe(kube, ns, "bundle", "core")
        subscribe(kube, ns, "vm", "vm", parent="bundle")
        subscribe(kube, ns, "spare", "vm", parent="vm")
        active(kube, ns, "spare", "ActivationSucceeded")
        delete(kube, h.path("Subscription", ns, "bundle"))
        for name in ("vm", "spare"):
            obj = active(kube, ns, name, "ParentDeactivated")
            assert obj["status"]["deactivatedAt"] and obj["status"]["ready"] == "False"
            events = wait_for(  # Events are posted in the background, after the status
                lambda n=name: [e for e in events_for(kube, ns, n) if e["reason"] == "Deactivated"],
                what="Deactivated event",
            )
            assert events[0]["message"].startswith("ParentDeactivated: ")

    def test_under_orphan_a_child_outlives_its_parent_but_not_its_coverage(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        orphan = {"lifecycle": {"onParentDeactivate": "Orphan"}}
        offerings(kube, ns, {"core": {}, "vm": {}, "disk": {"requires": ["vm"], **orphan}})
        offerings(kube, ns, {"monitor": orphan})
        subscribe(kube, ns, "bundle", "core")
        subscribe(kube, ns, "vm", "vm", parent="bundle")
        subscribe(kube, ns, "disk", "disk", parent="bundle")
        subscribe(kube, ns, "monitor", "monitor", parent="bundle")
        active(kube, ns, "disk", "ActivationSucceeded")
        active(kube, ns, "monitor", "ActivationSucceeded")
        delete(kube, h.path("Subscription", ns, "bundle"))
        kept = active(kube, ns, "monitor", "Orphaned")
        assert kept["status"]["ready"] == "True" and h.reason(kept, "Ready") == "Orphaned"
        active(kube, ns, "vm", "ParentDeactivated")  # Deactivate by default
        # disk outlived the parent too, but vm no longer covers it.
        lost = active(kube, ns, "disk", "CompatibilityRequirementNotMet")
        assert f"{ns}/vm" in message(lost, "Active")

    def test_an_offering_that_forbids_overrides_wins_over_the_subscription(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        strict = {"lifecycle": {"onParentDeactivate": "Deactivate", "allowOverride": False}}
        offerings(kube, ns, {"core": {}, "strict": strict, "lenient": {}})
        subscribe(kube, ns, "bundle", "core")
        wants_orphan = {"onParentDeactivate": "Orphan"}
        subscribe(kube, ns, "held", "strict", parent="bundle", lifecycle=wants_orphan)
        subscribe(kube, ns, "free", "lenient", parent="bundle", lifecycle=wants_orphan)
        active(kube, ns, "held", "ActivationSucceeded")
        active(kube, ns, "free", "ActivationSucceeded")
        delete(kube, h.path("Subscription", ns, "bundle"))
        active(kube, ns, "held", "ParentDeactivated")
        active(kube, ns, "free", "Orphaned")

    def test_only_an_explicit_policy_overrides_the_offerings(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        configmap(kube, ns, "vm-1")
        orphan = {"lifecycle": {"onParentDeactivate": "Orphan"}}
        offerings(kube, ns, {"core": {}, "vm": orphan})
        subscribe(kube, ns, "bundle", "core")
        # A lifecycle block holding only targetRef: the CRD defaults onParentDeactivate to
        # Deactivate, which must not override the Offering's Orphan (DESIGN §2.5).
        subscribe(kube, ns, "targeted", "vm", parent="bundle", lifecycle=target("vm-1", ns))
        stored = h.fetch(kube, "Subscription", ns, "targeted")
        assert stored["spec"]["lifecycle"]["onParentDeactivate"] == "Deactivate"
        # Server-side apply of an explicit Deactivate does override.
        body = h.subscription_body(
            "explicit", ns, "vm", parent="bundle", lifecycle={"onParentDeactivate": "Deactivate"}
        )
        apply(kube, body)
        active(kube, ns, "targeted", "ActivationSucceeded")
        active(kube, ns, "explicit", "ActivationSucceeded")
        delete(kube, h.path("Subscription", ns, "bundle"))
        active(kube, ns, "targeted", "Orphaned")
        active(kube, ns, "explicit", "ParentDeactivated")


class TestDeletion:
    def test_deleting_deactivates_and_waits_for_the_charge_job_keeping_the_finalizer(
        self, kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
    ) -> None:
        ns = kube_namespace
        offerings(kube, ns, {"vm": {}})
        subscribe(kube, ns, "acme", "vm")
        active(kube, ns, "acme", "ActivationSucceeded")
        delete(kube, h.path("Subscription", ns, "acme"))
        obj = active(kube, ns, "acme", "MarkedForDeletion")
        assert obj["status"]["deactivatedAt"] and h.reason(obj, "Ready") == "ValidationSucceeded"
        deleting = wait_for(
            lambda: h.condition(h.fetch(kube, "Subscription", ns, "acme"), "Deleting"),
            what="Deleting condition",
        )
        assert (deleting["status"], deleting["reason"]) == ("False", "WaitingForCollectionJob")
        events = wait_for(
            lambda: [e for e in events_for(kube, ns, "acme") if e["reason"] == "Deactivated"],
            what="Deactivated event",
        )
        assert events[0]["type"] == "Normal"
        wait_more_reconciles(controller, SUBSCRIPTIONS, count=5)
        still = h.fetch(kube, "Subscription", ns, "acme")
        assert still["metadata"]["finalizers"] == ["subscriptions.finops.stakater.com/finalizer"]


def test_two_subscriptions_naming_each_other_as_parents_wait_without_looping(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    ns = kube_namespace
    env = {**h.NO_WEBHOOKS, "FINOPS_RESYNC_SECONDS": "600"}
    with running_controller(kube, ns, env=env) as proc:
        offerings(kube, ns, {"core": {}})
        subscribe(kube, ns, "left", "core", parent="right")
        subscribe(kube, ns, "right", "core", parent="left")
        for name in ("left", "right"):
            obj = ready(kube, ns, name, "ParentSubscriptionNotReady")
            assert "compatibilityRoot" not in obj["status"]
        # Quiet once settled: no event-driven loop between the two (the resync is 10 min).
        # Other tests' leftovers may recheck a target now and then, hence a small allowance.
        wait_for(lambda: reconciles(proc, SUBSCRIPTIONS) > 0, what="some reconciles")
        before = reconciles(proc, SUBSCRIPTIONS)
        time.sleep(3)
        assert reconciles(proc, SUBSCRIPTIONS) - before <= 3
        for name in ("left", "right"):
            obj = h.fetch(kube, "Subscription", ns, name)
            assert h.reason(obj, "Ready") == "ParentSubscriptionNotReady"
