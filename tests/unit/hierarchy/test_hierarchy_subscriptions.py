"""Subscription gates, activation, terminal deactivation, the delete path, the parent policy."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from tests.unit.hierarchy import builders as b

from finops.hierarchy import family, refs, subscriptions
from finops.hierarchy.subscriptions import Target

NOW = b.T0 + dt.timedelta(hours=1)
LATER = NOW + dt.timedelta(hours=1)
STAMP = refs.timestamp(NOW)
READY_OFFERING = b.offering("plan", ready="True")
DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api", "namespace": "prod"}


def decide(
    sub: dict[str, Any],
    *,
    offering: refs.Observed = READY_OFFERING,
    others: list[dict[str, Any]] | None = None,
    target: subscriptions.TargetObserved = None,
    now: dt.datetime = NOW,
) -> subscriptions.SubscriptionPlan:
    everyone = [sub, *(others or [])]
    return subscriptions.plan(
        sub,
        offering=offering,
        lookup=b.lookup_from(everyone),
        members=b.members_from(everyone),
        target=target,
        now=now,
    )


def applied(sub: dict[str, Any], decided: subscriptions.SubscriptionPlan) -> dict[str, Any]:
    return {**sub, "status": decided.status}


def cond(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return b.condition({"status": status}, type_)  # type: ignore[return-value]


def active_parent(name: str = "parent", root: str = "root-uid") -> dict[str, Any]:
    return b.subscription(name, "plan", status=b.active_status(root))


def active_child(**kw: Any) -> dict[str, Any]:
    return b.subscription(
        "child", "plan", parent="parent", status=b.active_status("root-uid"), **kw
    )


class TestHoldingGates:
    @pytest.mark.parametrize(
        ("offering", "reason", "message"),
        [
            (None, "OfferingNotFound", f"offering {b.NS}/plan not found"),
            (
                b.offering("plan", ready="False"),
                "OfferingNotReady",
                f"offering {b.NS}/plan is not ready",
            ),
            (
                refs.ReadError("timeout"),
                "ValidationError",
                f"reading offering {b.NS}/plan: timeout",
            ),
        ],
    )
    def test_the_offering_gate(self, offering: refs.Observed, reason: str, message: str) -> None:
        decided = decide(b.subscription("s", "plan"), offering=offering)
        ready = cond(decided.status, "Ready")
        assert ready is not None
        assert (ready["status"], ready["reason"], ready["message"]) == ("False", reason, message)
        assert decided.status["ready"] == "False"
        assert cond(decided.status, "Active") is None
        assert decided.retry is (reason == "ValidationError")

    def test_the_parent_gate_waits_for_a_missing_parent(self) -> None:
        decided = decide(b.subscription("s", "plan", parent="parent"))
        assert decided.reason == "ParentSubscriptionNotFound"
        assert decided.message == f"parent subscription {b.NS}/parent not found"

    def test_the_parent_gate_waits_for_a_parent_not_ready(self) -> None:
        parent = b.subscription("parent", "plan", status={"ready": "False"})
        decided = decide(b.subscription("s", "plan", parent="parent"), others=[parent])
        assert decided.reason == "ParentSubscriptionNotReady"

    def test_the_parent_gate_holds_a_waiting_child_of_a_deactivated_parent(self) -> None:
        ended = {**b.active_status("r"), "ready": "False", "deactivatedAt": "2026-08-12T08:45:00Z"}
        parent = b.subscription("parent", "plan", status=ended)
        decided = decide(b.subscription("s", "plan", parent="parent"), others=[parent])
        assert decided.reason == "ParentSubscriptionDeactivated"
        assert "deactivatedAt" not in decided.status

    def test_naming_itself_as_parent_is_a_circular_dependency(self) -> None:
        decided = decide(b.subscription("s", "plan", parent="s"))
        assert decided.reason == "CircularDependencyDetected"

    def test_the_compatibility_gate_waits_for_a_provider(self) -> None:
        needy = b.offering("monitoring", requires=["vm-standard"], ready="True")
        root = b.subscription("bundle", "core", status=b.active_status("root-uid"))
        sub = b.subscription("mon", "monitoring", parent="bundle")
        decided = decide(sub, offering=needy, others=[root])
        assert decided.reason == "CompatibilityRequirementNotMet"
        assert decided.message == (
            f"required offering {b.NS}/vm-standard not covered by an active subscription "
            "in the family"
        )
        assert decided.status["compatibilityRoot"] == "root-uid"

    def test_a_requirement_bearing_root_can_never_be_covered(self) -> None:
        needy = b.offering("monitoring", requires=["vm-standard"], ready="True")
        sub = b.subscription("mon", "monitoring")
        vm = b.subscription("vm", "vm-standard", parent="mon", status=b.active_status("x"))
        vm["status"]["compatibilityRoot"] = sub["metadata"]["uid"]
        assert decide(sub, offering=needy, others=[vm]).reason == "CompatibilityRequirementNotMet"

    def test_the_target_gate_waits_for_a_missing_target(self) -> None:
        sub = b.subscription("s", "plan", lifecycle={"targetRef": DEPLOYMENT})
        decided = decide(sub, target=Target.NOT_FOUND)
        assert decided.reason == "TargetNotFound"
        assert decided.message == "target apps/v1 Deployment prod/api not found"

    def test_an_incomplete_target_reads_as_missing(self) -> None:
        sub = b.subscription("s", "plan", lifecycle={"targetRef": {"name": "api"}})
        assert decide(sub, target=Target.FOUND).reason == "TargetNotFound"

    def test_a_target_naming_the_subscription_itself_is_refused(self) -> None:
        me = {
            "apiVersion": "finops.stakater.com/v1alpha1",
            "kind": "Subscription",
            "name": "s",
            "namespace": b.NS,
        }
        sub = b.subscription("s", "plan", lifecycle={"targetRef": me})
        assert decide(sub, target=Target.FOUND).reason == "TargetIsSelfReference"

    @pytest.mark.parametrize(
        "field",
        [("kind", "Deployment"), ("apiVersion", "v1"), ("namespace", "other"), ("name", "t")],
    )
    def test_a_target_differing_in_any_of_the_four_fields_is_not_self(
        self, field: tuple[str, str]
    ) -> None:
        me = {
            "apiVersion": "finops.stakater.com/v1alpha1",
            "kind": "Subscription",
            "name": "s",
            "namespace": b.NS,
            field[0]: field[1],
        }
        sub = b.subscription("s", "plan", lifecycle={"targetRef": me})
        assert decide(sub, target=Target.FOUND).reason == "ActivationSucceeded"

    def test_the_first_failing_gate_wins(self) -> None:
        sub = b.subscription("s", "plan", parent="missing", lifecycle={"targetRef": DEPLOYMENT})
        assert decide(sub, offering=None, target=Target.NOT_FOUND).reason == "OfferingNotFound"
        assert decide(sub, target=Target.NOT_FOUND).reason == "ParentSubscriptionNotFound"

    def test_the_root_is_not_stamped_while_the_parent_gate_holds(self) -> None:
        decided = decide(b.subscription("s", "plan", parent="missing"))
        assert "compatibilityRoot" not in decided.status

    def test_holding_keeps_the_transition_time_and_writes_nothing_new(self) -> None:
        sub = b.subscription("s", "plan")
        first = decide(sub, offering=None)
        second = decide(applied(sub, first), offering=None, now=LATER)
        assert not second.changed
        assert cond(second.status, "Ready") == cond(first.status, "Ready")


class TestActivation:
    def test_a_root_activates_and_stamps_its_own_uid(self) -> None:
        sub = b.subscription("s", "plan")
        decided = decide(sub)
        assert decided.activated and decided.changed
        assert decided.status["activatedAt"] == STAMP
        assert decided.status["ready"] == "True"
        assert decided.status["compatibilityRoot"] == sub["metadata"]["uid"]
        for type_ in ("Ready", "Active"):
            found = cond(decided.status, type_)
            assert found is not None
            assert (found["status"], found["reason"]) == ("True", "ActivationSucceeded")
            assert found["observedGeneration"] == 1
        assert [e.reason for e in decided.events] == ["Activated"]

    def test_a_child_takes_its_parents_root(self) -> None:
        decided = decide(b.subscription("s", "plan", parent="parent"), others=[active_parent()])
        assert decided.status["compatibilityRoot"] == "root-uid"
        assert decided.reason == "ActivationSucceeded"

    def test_a_child_walks_up_to_an_unstamped_root(self) -> None:
        root = b.subscription("root", "plan", status={"ready": "True"})
        mid = b.subscription("mid", "plan", parent="root", status={"ready": "True"})
        decided = decide(b.subscription("s", "plan", parent="mid"), others=[root, mid])
        assert decided.status["compatibilityRoot"] == root["metadata"]["uid"]

    def test_activated_at_is_written_once(self) -> None:
        sub = b.subscription("s", "plan")
        first = decide(sub)
        second = decide(applied(sub, first), now=LATER)
        assert second.status["activatedAt"] == STAMP
        assert not second.activated and not second.changed and not second.events

    def test_a_transient_failure_holds_an_active_subscription_without_ending_it(self) -> None:
        sub = b.subscription("s", "plan")
        active = applied(sub, decide(sub))
        held = decide(active, offering=b.offering("plan", ready="False"), now=LATER)
        assert held.status["ready"] == "False"
        assert held.reason == "OfferingNotReady"
        assert "deactivatedAt" not in held.status
        assert held.status["activatedAt"] == STAMP
        assert cond(held.status, "Active") == cond(active["status"], "Active")

    def test_an_active_subscription_whose_parent_is_briefly_not_ready_is_only_held(self) -> None:
        parent = b.subscription(
            "parent", "plan", status={**b.active_status("root-uid"), "ready": "False"}
        )
        held = decide(active_child(), others=[parent])
        assert held.reason == "ParentSubscriptionNotReady"
        assert not held.deactivated

    def test_a_failed_target_read_never_ends_an_active_subscription(self) -> None:
        sub = b.subscription(
            "s", "plan", lifecycle={"targetRef": DEPLOYMENT}, status=b.active_status("r")
        )
        held = decide(sub, target=refs.ReadError("forbidden"))
        assert held.reason == "ValidationError" and held.retry
        assert not held.deactivated


class TestDeactivation:
    def assert_deactivated(self, decided: subscriptions.SubscriptionPlan, reason: str) -> None:
        assert decided.deactivated
        assert decided.status["deactivatedAt"] == STAMP
        assert decided.status["ready"] == "False"
        ready, active = cond(decided.status, "Ready"), cond(decided.status, "Active")
        assert ready is not None and active is not None
        assert (ready["status"], ready["reason"]) == ("False", "ValidationSucceeded")
        assert (active["status"], active["reason"]) == ("False", reason)
        assert any(e.reason == "Deactivated" and reason in e.message for e in decided.events)

    def test_a_deactivated_parent_ends_the_child(self) -> None:
        parent = active_parent()
        parent["status"]["deactivatedAt"] = "2026-08-12T09:30:00Z"
        decided = decide(active_child(), others=[parent])
        self.assert_deactivated(decided, "ParentDeactivated")
        assert decided.message == f"parent subscription {b.NS}/parent was deactivated"

    def test_a_vanished_parent_ends_the_child(self) -> None:
        decided = decide(active_child())
        self.assert_deactivated(decided, "ParentDeactivated")
        assert decided.message == f"parent subscription {b.NS}/parent no longer exists"

    def test_lost_coverage_ends_an_active_subscription(self) -> None:
        needy = b.offering("disk", requires=["vm"], ready="True")
        sub = b.subscription("disk", "disk", parent="parent", status=b.active_status("root-uid"))
        decided = decide(sub, offering=needy, others=[active_parent()])
        self.assert_deactivated(decided, "CompatibilityRequirementNotMet")

    def test_a_deleted_target_ends_an_active_subscription(self) -> None:
        sub = b.subscription(
            "s", "plan", lifecycle={"targetRef": DEPLOYMENT}, status=b.active_status("r")
        )
        decided = decide(sub, target=Target.NOT_FOUND)
        self.assert_deactivated(decided, "TargetNotFound")

    def test_deletion_deactivates_and_waits_for_the_collection_job(self) -> None:
        sub = b.subscription("s", "plan", status=b.active_status("r"))
        sub["metadata"]["deletionTimestamp"] = "2026-08-12T09:59:00Z"
        decided = decide(sub)
        self.assert_deactivated(decided, "MarkedForDeletion")
        deleting = cond(decided.status, "Deleting")
        assert deleting is not None
        assert (deleting["status"], deleting["reason"]) == ("False", "WaitingForCollectionJob")
        assert not any(e.type == "Warning" for e in decided.events)

    def test_a_deactivated_subscription_is_never_revalidated(self) -> None:
        child = active_child()
        ended = applied(child, decide(child))  # the parent vanished: ParentDeactivated
        assert family.is_deactivated(ended)
        again = decide(ended, others=[active_parent()], now=LATER)
        assert not again.changed and again.reason is None
        assert again.status == ended["status"]
        assert family.is_deactivated(ended) and not again.events

    def test_deleting_an_ended_subscription_only_relabels_the_cause(self) -> None:
        parent = active_parent()
        parent["status"]["deactivatedAt"] = "2026-08-12T09:30:00Z"
        child = active_child()
        ended = applied(child, decide(child, others=[parent]))
        ended["metadata"]["deletionTimestamp"] = "2026-08-12T11:00:00Z"
        decided = decide(ended, others=[parent], now=LATER)
        assert decided.status["deactivatedAt"] == STAMP
        before, after = cond(ended["status"], "Active"), cond(decided.status, "Active")
        assert before is not None and after is not None
        assert after["reason"] == "MarkedForDeletion"
        assert "ParentDeactivated" in after["message"]
        assert after["lastTransitionTime"] == before["lastTransitionTime"]
        assert not decided.deactivated and not decided.events
        assert (cond(decided.status, "Deleting") or {})["reason"] == "WaitingForCollectionJob"

    def test_the_deleting_condition_is_never_true(self) -> None:
        sub = b.subscription("s", "plan")
        sub["metadata"]["deletionTimestamp"] = "2026-08-12T09:59:00Z"
        first = applied(sub, decide(sub))
        second = decide(first, now=LATER)
        assert (cond(second.status, "Deleting") or {})["status"] == "False"
        assert not second.changed


class TestParentPolicy:
    ORPHAN_OFFERING = b.offering("plan", ready="True", lifecycle={"onParentDeactivate": "Orphan"})

    def test_an_orphan_outlives_its_parent(self) -> None:
        decided = decide(active_child(), offering=self.ORPHAN_OFFERING)
        assert decided.reason == "Orphaned" and not decided.deactivated
        for type_ in ("Ready", "Active"):
            found = cond(decided.status, type_)
            assert found is not None and (found["status"], found["reason"]) == ("True", "Orphaned")
        assert [e.reason for e in decided.events] == ["Orphaned"]
        again = decide(applied(active_child(), decided), offering=self.ORPHAN_OFFERING, now=LATER)
        assert again.reason == "Orphaned" and not again.events

    def test_an_orphan_still_loses_coverage_its_parent_provided(self) -> None:
        offering = b.offering(
            "backup", requires=["db"], ready="True", lifecycle={"onParentDeactivate": "Orphan"}
        )
        db = b.subscription("parent", "db", status=b.active_status("root-uid"))
        db["status"]["deactivatedAt"] = "2026-08-12T09:30:00Z"
        child = b.subscription(
            "child", "backup", parent="parent", status=b.active_status("root-uid")
        )
        decided = decide(child, offering=offering, others=[db])
        assert decided.deactivated
        assert (cond(decided.status, "Active") or {})["reason"] == "CompatibilityRequirementNotMet"

    def test_an_orphan_covered_by_a_sibling_stays_up(self) -> None:
        offering = b.offering(
            "backup", requires=["db"], ready="True", lifecycle={"onParentDeactivate": "Orphan"}
        )
        root = b.subscription("root", "core", status=b.active_status("root-uid"))
        replica = b.subscription("replica", "db", parent="root", status=b.active_status("root-uid"))
        child = b.subscription("child", "backup", parent="gone", status=b.active_status("root-uid"))
        decided = decide(child, offering=offering, others=[root, replica])
        assert decided.reason == "Orphaned"

    def test_a_never_activated_child_of_a_vanished_parent_just_waits(self) -> None:
        child = b.subscription("child", "plan", parent="parent")
        assert decide(child, offering=self.ORPHAN_OFFERING).reason == "ParentSubscriptionNotFound"


def lifecycle_sub(lifecycle: dict[str, Any], **meta: Any) -> dict[str, Any]:
    sub = b.subscription("s", "plan", lifecycle=lifecycle)
    sub["metadata"].update(meta)
    return sub


def offering_with(lifecycle: dict[str, Any] | None) -> dict[str, Any]:
    return b.offering("plan", lifecycle=lifecycle)


def applied_by_kubectl(spec_lifecycle: dict[str, Any]) -> dict[str, str]:
    body = {"spec": {"offeringRef": b.ref("plan"), "lifecycle": spec_lifecycle}}
    return {subscriptions.LAST_APPLIED: json.dumps(body)}


def owned(operation: str, with_policy: bool) -> list[dict[str, Any]]:
    lifecycle: dict[str, Any] = {"f:targetRef": {}}
    if with_policy:
        lifecycle["f:onParentDeactivate"] = {}
    fields = {"f:spec": {"f:lifecycle": lifecycle, "f:offeringRef": {}}}
    return [{"manager": "m", "operation": operation, "fieldsV1": fields}]


DEFAULTED = {"onParentDeactivate": "Deactivate", "targetRef": DEPLOYMENT}


class TestEffectivePolicy:
    @pytest.mark.parametrize(
        ("sub", "offering", "expected"),
        [
            (b.subscription("s", "plan"), None, "Deactivate"),
            (b.subscription("s", "plan"), offering_with(None), "Deactivate"),
            (
                b.subscription("s", "plan"),
                offering_with({"onParentDeactivate": "Orphan"}),
                "Orphan",
            ),
            (lifecycle_sub({"onParentDeactivate": "Orphan"}), offering_with(None), "Orphan"),
            # A block with only targetRef (defaulted by the CRD) does not override.
            (
                lifecycle_sub({"targetRef": DEPLOYMENT}),
                offering_with({"onParentDeactivate": "Orphan"}),
                "Orphan",
            ),
            (lifecycle_sub(DEFAULTED), offering_with({"onParentDeactivate": "Orphan"}), "Orphan"),
            (
                lifecycle_sub(DEFAULTED, annotations=applied_by_kubectl({"targetRef": DEPLOYMENT})),
                offering_with({"onParentDeactivate": "Orphan"}),
                "Orphan",
            ),
            (
                lifecycle_sub(DEFAULTED, managedFields=owned("Apply", with_policy=False)),
                offering_with({"onParentDeactivate": "Orphan"}),
                "Orphan",
            ),
            # A Deactivate the client provably sent does override.
            (
                lifecycle_sub(DEFAULTED, annotations=applied_by_kubectl(DEFAULTED)),
                offering_with({"onParentDeactivate": "Orphan"}),
                "Deactivate",
            ),
            (
                lifecycle_sub(DEFAULTED, managedFields=owned("Apply", with_policy=True)),
                offering_with({"onParentDeactivate": "Orphan"}),
                "Deactivate",
            ),
            # allowOverride: false is honoured.
            (
                lifecycle_sub({"onParentDeactivate": "Orphan"}),
                offering_with({"onParentDeactivate": "Deactivate", "allowOverride": False}),
                "Deactivate",
            ),
            (
                lifecycle_sub(DEFAULTED, annotations=applied_by_kubectl(DEFAULTED)),
                offering_with({"onParentDeactivate": "Orphan", "allowOverride": False}),
                "Orphan",
            ),
            (
                lifecycle_sub({"onParentDeactivate": "Orphan"}),
                offering_with({"onParentDeactivate": "Deactivate", "allowOverride": True}),
                "Orphan",
            ),
        ],
    )
    def test_subscription_then_offering_then_deactivate(
        self, sub: dict[str, Any], offering: dict[str, Any] | None, expected: str
    ) -> None:
        assert subscriptions.effective_on_parent_deactivate(sub, offering) == expected

    def test_a_plain_update_owning_the_field_cannot_prove_a_deactivate(self) -> None:
        sub = lifecycle_sub(DEFAULTED, managedFields=owned("Update", with_policy=True))
        assert subscriptions.explicit_on_parent_deactivate(sub) is None

    def test_allow_override_false_keeps_a_child_alive_against_its_own_deactivate(self) -> None:
        offering = b.offering(
            "plan", ready="True", lifecycle={"onParentDeactivate": "Orphan", "allowOverride": False}
        )
        child = active_child(lifecycle={"onParentDeactivate": "Deactivate"})
        child["metadata"]["annotations"] = applied_by_kubectl({"onParentDeactivate": "Deactivate"})
        assert decide(child, offering=offering).reason == "Orphaned"


class TestFinalizer:
    def test_a_live_subscription_gets_the_finalizer_once(self) -> None:
        sub = b.subscription("s", "plan")
        assert subscriptions.needs_finalizer(sub)
        sub["metadata"]["finalizers"] = [subscriptions.FINALIZER]
        assert not subscriptions.needs_finalizer(sub)
