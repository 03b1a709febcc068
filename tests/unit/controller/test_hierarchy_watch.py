"""Who a watch event wakes, and the indexes behind it (the glue around the pure decisions)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.hierarchy import builders as b

from finops.controller import caches, hierarchy_watch, ledger_mirror
from finops.hierarchy import refs

Store = dict[tuple[str, str], dict[str, Any]]


def cluster(*objs: dict[str, Any]) -> tuple[caches.Caches, Store, Store]:
    offerings: Store = {}
    subs: Store = {}
    c = caches.Caches(offerings, subs, {})
    for obj in objs:
        store = offerings if obj["kind"] == "Offering" else subs
        store[refs.key_of(obj)] = obj
        if obj["kind"] == "Offering":
            c.offering_changed(None, obj)
        else:
            c.subscription_changed(None, obj)
    return c, offerings, subs


def change(c: caches.Caches, store: Store, old: dict[str, Any], new: dict[str, Any] | None) -> None:
    """Apply one watch event the way the Source does: store first, then the indexes."""
    if new is None:
        store.pop(refs.key_of(old))
    else:
        store[refs.key_of(new)] = new
    if old["kind"] == "Offering":
        c.offering_changed(old, new)
    else:
        c.subscription_changed(old, new)


def sub_keys(*names: str) -> set[tuple[str, str, str]]:
    return {("Subscription", b.NS, n) for n in names}


class TestTheFamilyIndex:
    @settings(max_examples=50, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2)), max_size=30))
    def test_incremental_updates_match_an_index_built_from_scratch(
        self, moves: list[tuple[int, int]]
    ) -> None:
        c, _, subs = cluster()
        for slot, root in moves:
            name = f"s{slot}"
            old = subs.get((b.NS, name))
            new = None
            if root:
                new = b.subscription(name, "vm", status={"compatibilityRoot": f"r{root}"})
            if old is None and new is None:
                continue
            if old is None:
                assert new is not None
                subs[(b.NS, name)] = new
                c.subscription_changed(None, new)
            else:
                change(c, subs, old, new)
        snapshot = b.members_from(subs.values())
        for uid in ("r0", "r1", "r2"):
            expected = sorted(refs.key_of(s) for s in snapshot(uid))
            assert sorted(refs.key_of(s) for s in c.members(uid)) == expected


class TestSubscriptionEvents:
    def test_an_activation_wakes_the_family_and_children_waiting_for_a_root(self) -> None:
        root = b.subscription("root", "core", status={"compatibilityRoot": "R"})
        sibling = b.subscription("sib", "vm", parent="root", status=b.active_status("R"))
        waiting = b.subscription("kid", "vm", parent="root")
        held = b.subscription("disk", "disk", parent="sib", status={"compatibilityRoot": "R"})
        up = b.subscription("mon", "mon", parent="sib", status=b.active_status("R"))
        c, _, subs = cluster(root, sibling, waiting, held, up)
        now_active = copy.deepcopy(root)
        now_active["status"] = b.active_status("R")
        change(c, subs, root, now_active)
        woken = hierarchy_watch.subscription_wakes(c, root, now_active)
        # The family member that never activated, the children, and root itself; not the
        # grandchild that is active already.
        assert woken == sub_keys("root", "sib", "kid", "disk")

    def test_a_routine_status_write_wakes_nobody(self) -> None:
        sub = b.subscription("acme", "vm", status=b.active_status("R"))
        c, _, subs = cluster(sub)
        costed = copy.deepcopy(sub)
        costed["status"]["costs"] = [{"granularity": "Hour", "current": 1}]
        change(c, subs, sub, costed)
        assert hierarchy_watch.subscription_wakes(c, sub, costed) == set()

    def test_a_parent_turning_ready_wakes_its_children_even_without_a_flip(self) -> None:
        held = b.subscription("root", "core", status={**b.active_status("R"), "ready": "False"})
        kid = b.subscription("kid", "vm", parent="root")
        c, _, subs = cluster(held, kid)
        ok = copy.deepcopy(held)
        ok["status"]["ready"] = "True"
        change(c, subs, held, ok)
        assert hierarchy_watch.subscription_wakes(c, held, ok) == sub_keys("kid")

    def test_a_stamped_root_wakes_the_subscription_itself(self) -> None:
        """The lost wake-up the convergence benchmark found: `disk` planned a coverage hold
        and stamped its root; `vm` activated before that stamp reached the cache, so the
        family fan-out missed `disk`. The stamp arriving must make it look again."""
        root = b.subscription("root", "core", status=b.active_status("R"))
        vm = b.subscription("vm", "vm", parent="root", status=b.active_status("R"))
        disk = b.subscription("disk", "disk", parent="root")
        c, _, subs = cluster(root, vm, disk)
        stamped = copy.deepcopy(disk)
        stamped["status"] = {"compatibilityRoot": "R", "ready": "False"}
        change(c, subs, disk, stamped)
        assert hierarchy_watch.subscription_wakes(c, disk, stamped) == sub_keys("disk")
        again = copy.deepcopy(stamped)
        again["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        change(c, subs, stamped, again)
        assert hierarchy_watch.subscription_wakes(c, stamped, again) == set()

    def test_a_dependent_going_away_wakes_the_offering_being_deleted(self) -> None:
        vm = b.offering("vm", ready="True")
        vm["metadata"]["deletionTimestamp"] = "2026-08-12T09:00:00Z"
        sub = b.subscription("acme", "vm")
        c, _, subs = cluster(vm, sub)
        change(c, subs, sub, None)
        woken = hierarchy_watch.subscription_wakes(c, sub, None)
        assert ("Offering", b.NS, "vm") in woken

    def test_a_new_finalizer_wakes_the_subscription_itself(self) -> None:
        sub = b.subscription("acme", "vm")
        with_finalizer = copy.deepcopy(sub)
        with_finalizer["metadata"]["finalizers"] = ["x"]
        assert hierarchy_watch.beyond_status(sub, with_finalizer)
        assert not hierarchy_watch.beyond_status(sub, copy.deepcopy(sub))


class TestOfferingEvents:
    def test_readiness_flipping_wakes_bound_subscriptions_and_requiring_offerings(self) -> None:
        vm = b.offering("vm", ready="False")
        disk = b.offering("disk", requires=["vm"])
        sub = b.subscription("acme", "vm")
        c, offerings, _ = cluster(vm, disk, sub)
        ready_vm = copy.deepcopy(vm)
        ready_vm["status"]["ready"] = "True"
        change(c, offerings, vm, ready_vm)
        woken = hierarchy_watch.offering_wakes(c, vm, ready_vm)
        assert woken == {("Offering", b.NS, "disk"), ("Subscription", b.NS, "acme")}

    def test_unresolved_offerings_are_the_ones_a_book_change_wakes(self) -> None:
        waiting = b.offering("metered")
        done = b.offering("done", ready="True")
        done["status"]["resolvedPricing"] = {"resolvedAt": "2026-08-12T09:00:00Z"}
        c, _, _ = cluster(waiting, done)
        assert hierarchy_watch.unresolved_offerings(c) == {("Offering", b.NS, "metered")}

    def test_a_book_change_counts_only_when_activation_readiness_or_rates_move(self) -> None:
        book = b.book("prices", {"cpuHour": "0.1"})
        relabelled = copy.deepcopy(book)
        relabelled["metadata"]["labels"] = {"x": "y"}
        demoted = copy.deepcopy(book)
        demoted["status"]["active"] = False
        assert not hierarchy_watch.book_changed(book, relabelled)
        assert hierarchy_watch.book_changed(book, demoted)
        assert hierarchy_watch.book_changed(None, book)


class TestMirrorBookkeeping:
    def test_a_relabelled_namespace_is_a_new_subscription_version(self) -> None:
        sub = b.subscription("acme", "vm")
        first = ledger_mirror.subscription_version(sub, {"stakater.com/tenant": "a"})
        again = ledger_mirror.subscription_version(sub, {"stakater.com/tenant": "a"})
        moved = ledger_mirror.subscription_version(sub, {"stakater.com/tenant": "b"})
        assert first == again and first != moved

    def test_a_relabelled_subscription_is_a_new_version_and_writes_its_labels(self) -> None:
        sub = b.subscription("acme", "vm")
        relabelled = copy.deepcopy(sub)
        relabelled["metadata"]["labels"] = {"cost-center": "cc-42"}
        namespace = {"stakater.com/tenant": "a"}
        first = ledger_mirror.subscription_version(sub, namespace)
        second = ledger_mirror.subscription_version(relabelled, namespace)
        assert first != second
        assert ledger_mirror.subscription_version(copy.deepcopy(relabelled), namespace) == second
        assert ledger_mirror.subscription_labels(relabelled) == {"cost-center": "cc-42"}
        assert ledger_mirror.subscription_labels(sub) == {}

    def test_backoff_doubles_up_to_its_cap_and_resets_on_success(self) -> None:
        backoff = ledger_mirror.Backoff(base=1.0, cap=5.0)
        assert [backoff.failed("k") for _ in range(4)] == [1.0, 2.0, 4.0, 5.0]
        backoff.succeeded("k")
        assert backoff.failed("k") == 1.0
