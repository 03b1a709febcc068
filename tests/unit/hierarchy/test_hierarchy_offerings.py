"""Offering readiness: the requirement graph, resolved pricing kept once, the delete guard."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.hierarchy import builders as b

from finops.api import views
from finops.hierarchy import offerings, refs

NOW = b.T0
LATER = NOW + dt.timedelta(hours=3)
BOOK = b.book("standard", {"cpuHour": "0.031", "gpuHour": "1.80"})
GPU_WORKLOAD = [
    {"name": "gpuHour", "margins": {"factorMilli": 1200}},
    {"name": "cpuHour", "margins": {"absoluteMicros": 200}},
]


def K(name: str) -> views.Key:
    return views.Key(b.NS, name)


def decide(
    offering: dict[str, Any],
    others: list[dict[str, Any]] | None = None,
    *,
    books: list[dict[str, Any]] | None = None,
    lookup: refs.Lookup | None = None,
    now: dt.datetime = NOW,
    **deletion: Any,
) -> offerings.OfferingPlan:
    return offerings.plan(
        offering,
        lookup=lookup or b.lookup_from(others or []),
        books=books if books is not None else [BOOK],
        now=now,
        **deletion,
    )


def cond(plan: offerings.OfferingPlan, type_: str) -> dict[str, Any]:
    found = b.condition({"status": plan.status}, type_)
    assert found is not None
    return dict(found)


# ---------------------------------------------------------------- the graph


def graph_lookup(edges: dict[str, list[str]]) -> Any:
    def requires(key: views.Key) -> list[views.Key] | None:
        return [K(n) for n in edges[key.name]] if key.name in edges else None

    return requires


class TestCycles:
    def test_a_self_reference_is_a_cycle_of_one(self) -> None:
        assert offerings.find_cycle(K("a"), graph_lookup({"a": ["a"]})) == [K("a"), K("a")]

    def test_a_loop_further_down_is_reported_from_the_start(self) -> None:
        found = offerings.find_cycle(K("a"), graph_lookup({"a": ["b"], "b": ["c"], "c": ["b"]}))
        assert found == [K("a"), K("b"), K("c"), K("b")]

    def test_a_diamond_is_not_a_cycle(self) -> None:
        edges = {"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": []}
        assert offerings.find_cycle(K("a"), graph_lookup(edges)) is None

    def test_missing_offerings_are_skipped(self) -> None:
        assert offerings.find_cycle(K("a"), graph_lookup({"a": ["ghost", "b"], "b": []})) is None

    def test_the_message_gives_the_path(self) -> None:
        assert offerings.cycle_message([K("a"), K("b"), K("a")]) == (
            f"circular dependency detected: {b.NS}/a -> {b.NS}/b -> {b.NS}/a"
        )

    @settings(max_examples=300, deadline=None)
    @given(
        st.dictionaries(
            st.sampled_from("abcdef"),
            st.lists(st.sampled_from("abcdefg"), max_size=3),
            min_size=1,
        )
    )
    def test_a_cycle_is_found_exactly_when_one_is_reachable(
        self, edges: dict[str, list[str]]
    ) -> None:
        start = sorted(edges)[0]
        found = offerings.find_cycle(K(start), graph_lookup(edges))

        def reach(n: str) -> set[str]:
            seen: set[str] = set()
            todo = list(edges.get(n, ()))
            while todo:
                m = todo.pop()
                if m in edges and m not in seen:
                    seen.add(m)
                    todo.extend(edges[m])
            return seen

        reachable = {start} | reach(start)
        expected = any(n in reach(n) for n in reachable)
        assert (found is not None) == expected
        if found is not None:
            names = [k.name for k in found]
            assert names[0] == start and names[-1] in names[:-1]
            assert all(y in edges[x] for x, y in itertools.pairwise(names))


# ---------------------------------------------------------------- readiness


class TestReadiness:
    def test_a_fee_only_offering_resolves_without_any_pricebook(self) -> None:
        plan = decide(b.offering("vm-standard"), books=[])
        assert plan.status["ready"] == "True"
        assert plan.status["resolvedPricing"] == {
            "resolvedAt": refs.timestamp(NOW),
            "meters": [],
            "subscriptionFee": b.FEE,
        }
        assert (cond(plan, "Ready")["reason"], cond(plan, "PricingResolved")["reason"]) == (
            "ValidationSucceeded",
            "PricingResolved",
        )

    def test_metered_prices_are_the_books_rates_with_margins(self) -> None:
        plan = decide(b.offering("gpu-workload", fee=None, meters=GPU_WORKLOAD))
        assert plan.status["resolvedPricing"]["meters"] == [
            {"name": "gpuHour", "unitPriceMicros": 2160000},
            {"name": "cpuHour", "unitPriceMicros": 31200},
        ]
        assert "subscriptionFee" not in plan.status["resolvedPricing"]

    @pytest.mark.parametrize(
        ("others", "requires", "reason", "message"),
        [
            ([], ["vm"], "RequiredOfferingNotFound", f"required offering {b.NS}/vm not found"),
            (
                [b.offering("vm", ready="False")],
                ["vm"],
                "RequiredOfferingNotReady",
                f"required offering {b.NS}/vm is not ready",
            ),
            (
                [b.offering("vm", requires=["mon"], ready="False")],
                ["vm"],
                "CircularDependencyDetected",
                f"circular dependency detected: {b.NS}/mon -> {b.NS}/vm -> {b.NS}/mon",
            ),
            (
                [],
                ["mon"],
                "CircularDependencyDetected",
                f"circular dependency detected: {b.NS}/mon -> {b.NS}/mon",
            ),
        ],
    )
    def test_requirement_reasons(
        self, others: list[dict[str, Any]], requires: list[str], reason: str, message: str
    ) -> None:
        plan = decide(b.offering("mon", requires=requires), others)
        for type_ in ("Ready", "PricingResolved"):
            found = cond(plan, type_)
            assert (found["status"], found["reason"], found["message"]) == (
                "False",
                reason,
                message,
            )
        assert plan.status["ready"] == "False"
        assert "resolvedPricing" not in plan.status

    def test_a_failed_read_is_a_validation_error(self) -> None:
        def lookup(key: views.Key) -> refs.Observed:
            return refs.ReadError("etcd timeout")

        plan = decide(b.offering("mon", requires=["vm"]), lookup=lookup)
        assert cond(plan, "Ready")["reason"] == "ValidationError"
        assert "etcd timeout" in cond(plan, "Ready")["message"]

    def test_a_cycle_outranks_a_missing_requirement(self) -> None:
        others = [b.offering("vm", requires=["mon"], ready="False")]
        plan = decide(b.offering("mon", requires=["ghost", "vm"]), others)
        assert cond(plan, "Ready")["reason"] == "CircularDependencyDetected"

    @pytest.mark.parametrize(
        ("books", "reason", "message"),
        [
            (
                [],
                "NoActivePricebook",
                f"offering {b.NS}/gpu: no active pricebook to resolve metered pricing",
            ),
            (
                [b.book("pct", {}, mode="percent")],
                "NoActivePricebook",
                f"offering {b.NS}/gpu: no active pricebook to resolve metered pricing",
            ),
            (
                [b.book("bad", {"gpuHour": "0.0000001"}, ready="False")],
                "PricebookParseFailed",
                f'offering {b.NS}/gpu: meter gpuHour: PriceBook {b.NS}/bad rate "gpuHour" '
                '("0.0000001"): more than 6 decimal places cannot be expressed in micros',
            ),
        ],
    )
    def test_pricing_reasons(self, books: list[dict[str, Any]], reason: str, message: str) -> None:
        plan = decide(b.offering("gpu", fee=None, meters=GPU_WORKLOAD), books=books)
        ready, pricing = cond(plan, "Ready"), cond(plan, "PricingResolved")
        assert ready["reason"] == pricing["reason"] == reason
        assert ready["message"] == pricing["message"] == message
        assert ready["status"] == pricing["status"] == "False"
        assert "resolvedPricing" not in plan.status

    def test_a_waiting_offering_resolves_once_a_book_is_active(self) -> None:
        offering = b.offering("gpu", fee=None, meters=GPU_WORKLOAD)
        waiting = decide(offering, books=[])
        offering["status"] = waiting.status
        assert offerings.awaits_pricebook(offering)
        resolved = decide(offering, books=[BOOK], now=LATER)
        assert resolved.status["ready"] == "True"
        assert resolved.status["resolvedPricing"]["resolvedAt"] == refs.timestamp(LATER)
        assert cond(resolved, "Ready")["lastTransitionTime"] == refs.timestamp(LATER)

    def test_resolved_pricing_is_kept_after_a_rate_change(self) -> None:
        offering = b.offering("gpu", fee=None, meters=GPU_WORKLOAD)
        offering["status"] = decide(offering).status
        cheaper = b.book("standard", {"cpuHour": "0.020", "gpuHour": "1.00"})
        again = decide(offering, books=[cheaper], now=LATER)
        assert again.status["resolvedPricing"] == offering["status"]["resolvedPricing"]
        assert not again.changed

    def test_resolved_pricing_is_kept_when_no_book_is_active_any_more(self) -> None:
        offering = b.offering("gpu", fee=None, meters=GPU_WORKLOAD)
        offering["status"] = decide(offering).status
        again = decide(offering, books=[], now=LATER)
        assert again.status["ready"] == "True"
        assert not offerings.awaits_pricebook(offering)

    def test_a_requirement_going_not_ready_unreadies_but_keeps_pricing(self) -> None:
        vm = b.offering("vm", ready="True")
        mon = b.offering("mon", requires=["vm"])
        mon["status"] = decide(mon, [vm]).status
        vm["status"] = {"ready": "False"}
        later = decide(mon, [vm], now=LATER)
        assert later.status["ready"] == "False"
        assert cond(later, "PricingResolved")["reason"] == "RequiredOfferingNotReady"
        assert later.status["resolvedPricing"] == mon["status"]["resolvedPricing"]

    def test_a_second_pass_changes_nothing_and_keeps_transition_times(self) -> None:
        offering = b.offering("mon", requires=["vm"])
        offering["status"] = decide(offering).status
        again = decide(offering, now=LATER)
        assert not again.changed
        assert cond(again, "Ready")["lastTransitionTime"] == refs.timestamp(NOW)
        assert cond(again, "Ready")["observedGeneration"] == 1


# ---------------------------------------------------------------- deletion


def deleting(offering: dict[str, Any]) -> dict[str, Any]:
    offering["metadata"]["deletionTimestamp"] = "2026-08-12T10:00:00Z"
    return offering


class TestDeletionGuard:
    def test_every_referencing_subscription_blocks_whatever_its_state(self) -> None:
        ended = {**b.active_status("r"), "ready": "False", "deactivatedAt": "2026-08-12T09:00:00Z"}
        winding_down = b.subscription("b-winding", "vm", status=ended)
        winding_down["metadata"]["deletionTimestamp"] = "2026-08-12T09:00:00Z"
        subs = [
            b.subscription("d-ready", "vm", status=b.active_status("r")),
            b.subscription("c-waiting", "vm", status={"ready": "False"}),
            winding_down,
            b.subscription("a-ended", "vm", status=ended),
            b.subscription("other", "db"),
        ]
        plan = decide(deleting(b.offering("vm")), subscriptions=subs, offerings=[])
        found = cond(plan, "Deleting")
        assert (found["status"], found["reason"]) == ("False", "DependentSubscriptionsExist")
        names = ", ".join(f"{b.NS}/{n}" for n in ("a-ended", "b-winding", "c-waiting", "d-ready"))
        assert found["message"] == f"still referenced by subscriptions: {names}"
        assert not plan.release_finalizer
        assert [e.reason for e in plan.events] == ["DeletionBlocked"]

    def test_a_requiring_offering_blocks(self) -> None:
        offs = [b.offering("mon", requires=["vm"]), b.offering("vm")]
        plan = decide(deleting(b.offering("vm")), subscriptions=[], offerings=offs)
        found = cond(plan, "Deleting")
        assert (found["reason"], found["message"]) == (
            "DependentOfferingsExist",
            f"still required by dependent resources: {b.NS}/mon",
        )

    def test_a_requiring_offering_being_deleted_itself_does_not_block(self) -> None:
        offs = [deleting(b.offering("mon", requires=["vm"]))]
        plan = decide(deleting(b.offering("vm")), subscriptions=[], offerings=offs)
        assert cond(plan, "Deleting")["reason"] == "DeletionAllowed"

    def test_nothing_referencing_allows_deletion_and_releases_the_finalizer(self) -> None:
        plan = decide(deleting(b.offering("vm")), subscriptions=[], offerings=[])
        found = cond(plan, "Deleting")
        assert (found["status"], found["reason"]) == ("True", "DeletionAllowed")
        assert plan.release_finalizer and not plan.events

    def test_a_failed_listing_holds_with_a_validation_error(self) -> None:
        plan = decide(
            deleting(b.offering("vm")), subscriptions=refs.ReadError("denied"), offerings=[]
        )
        assert cond(plan, "Deleting")["reason"] == "ValidationError"
        assert not plan.release_finalizer

    def test_a_blocked_deletion_is_announced_once(self) -> None:
        offering = deleting(b.offering("vm"))
        subs = [b.subscription("s", "vm")]
        offering["status"] = decide(offering, subscriptions=subs, offerings=[]).status
        again = decide(offering, subscriptions=subs, offerings=[], now=LATER)
        assert not again.events and not again.changed

    def test_a_live_offering_carries_no_deleting_condition(self) -> None:
        plan = decide(b.offering("vm"), subscriptions=[b.subscription("s", "vm")])
        assert b.condition({"status": plan.status}, "Deleting") is None


class TestWatchHelpers:
    def test_the_finalizer_is_added_once_to_live_offerings(self) -> None:
        offering = b.offering("vm")
        assert offerings.needs_finalizer(offering)
        offering["metadata"]["finalizers"] = [offerings.FINALIZER]
        assert not offerings.needs_finalizer(offering)
        assert not offerings.needs_finalizer(deleting(b.offering("db")))

    def test_readiness_flips_requeue_dependents(self) -> None:
        before, after = b.offering("vm", ready="False"), b.offering("vm", ready="True")
        assert offerings.readiness_flipped(before, after)
        assert offerings.readiness_flipped(None, after)
        assert not offerings.readiness_flipped(after, after)
