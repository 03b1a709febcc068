"""The webhooks' decisions: requirement cycles, dependents on delete, self-naming Subscriptions."""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.hierarchy import builders as b

from finops.hierarchy import admission

SELF_TARGET = {
    "apiVersion": "finops.stakater.com/v1alpha1",
    "kind": "Subscription",
    "name": "s",
    "namespace": b.NS,
}


class TestOfferingCreate:
    def test_a_self_reference_is_refused_and_named(self) -> None:
        verdict = admission.offering_create(b.offering("a", requires=["a"]), [])
        assert not verdict.allowed
        assert verdict.reason == "CircularDependencyDetected"
        assert verdict.message == f"circular dependency detected: {b.NS}/a -> {b.NS}/a"

    def test_a_cycle_through_stored_offerings_is_refused_and_named(self) -> None:
        stored = [b.offering("b", requires=["c"]), b.offering("c", requires=["a"])]
        verdict = admission.offering_create(b.offering("a", requires=["b"]), stored)
        assert verdict.message == (
            f"circular dependency detected: {b.NS}/a -> {b.NS}/b -> {b.NS}/c -> {b.NS}/a"
        )

    def test_missing_requirements_are_admitted(self) -> None:
        assert admission.offering_create(b.offering("a", requires=["ghost"]), []).allowed

    def test_an_acyclic_graph_is_admitted(self) -> None:
        stored = [b.offering("vm"), b.offering("disk", requires=["vm"])]
        verdict = admission.offering_create(b.offering("mon", requires=["vm", "disk"]), stored)
        assert verdict == admission.ALLOWED

    def test_the_requests_namespace_fills_a_body_without_one(self) -> None:
        offering = b.offering("a", requires=["a"])
        del offering["metadata"]["namespace"]
        assert not admission.offering_create(offering, [], namespace=b.NS).allowed

    def test_updates_are_never_refused(self) -> None:
        assert admission.offering_update().allowed


class TestOfferingDelete:
    def test_refused_while_subscriptions_reference_it_ready_or_not(self) -> None:
        ended = {"ready": "False", "deactivatedAt": "2026-08-12T09:00:00Z"}
        subs = [b.subscription("gone", "vm", status=ended), b.subscription("live", "vm")]
        verdict = admission.offering_delete(b.offering("vm"), subs, [])
        assert not verdict.allowed
        assert verdict.reason == "DependentSubscriptionsExist"
        assert verdict.message == (
            f"offering {b.NS}/vm cannot be deleted: still referenced by subscriptions: "
            f"{b.NS}/gone, {b.NS}/live"
        )

    def test_refused_while_offerings_require_it(self) -> None:
        verdict = admission.offering_delete(
            b.offering("vm"), [], [b.offering("disk", requires=["vm"])]
        )
        assert verdict.reason == "DependentOfferingsExist"
        assert verdict.message.endswith(f"still required by dependent resources: {b.NS}/disk")

    def test_both_kinds_of_dependents_are_named(self) -> None:
        verdict = admission.offering_delete(
            b.offering("vm"), [b.subscription("s", "vm")], [b.offering("disk", requires=["vm"])]
        )
        assert "still referenced by subscriptions" in verdict.message
        assert "still required by dependent resources" in verdict.message

    def test_allowed_when_nothing_references_it(self) -> None:
        unrelated = [b.subscription("s", "db")]
        assert admission.offering_delete(b.offering("vm"), unrelated, [b.offering("db")]).allowed


class TestSubscriptionCreate:
    def test_itself_as_parent_is_a_circular_dependency(self) -> None:
        verdict = admission.subscription_create(b.subscription("s", "plan", parent="s"))
        assert (verdict.allowed, verdict.reason) == (False, "CircularDependencyDetected")

    def test_itself_as_target_is_refused(self) -> None:
        sub = b.subscription("s", "plan", lifecycle={"targetRef": SELF_TARGET})
        verdict = admission.subscription_create(sub)
        assert (verdict.allowed, verdict.reason) == (False, "TargetIsSelfReference")

    @pytest.mark.parametrize(
        "change",
        [
            {"kind": "Deployment"},
            {"apiVersion": "finops.stakater.com/v1beta1"},
            {"namespace": "elsewhere"},
            {"name": "t"},
        ],
    )
    def test_a_target_of_the_same_name_elsewhere_is_fine(self, change: dict[str, Any]) -> None:
        sub = b.subscription("s", "plan", lifecycle={"targetRef": {**SELF_TARGET, **change}})
        assert admission.subscription_create(sub).allowed

    def test_a_parent_of_the_same_name_in_another_namespace_is_fine(self) -> None:
        sub = b.subscription("s", "plan")
        sub["spec"]["parent"] = {"subscriptionRef": {"name": "s", "namespace": "other"}}
        assert admission.subscription_create(sub).allowed

    def test_the_requests_namespace_is_used_when_the_body_has_none(self) -> None:
        sub = b.subscription("s", "plan", parent="s")
        del sub["metadata"]["namespace"]
        assert not admission.subscription_create(sub, namespace=b.NS).allowed
        assert admission.subscription_create(sub, namespace="other").allowed
