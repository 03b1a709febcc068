"""Families: the docs' tree end to end, coverage boundaries, and parent cycles that settle."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.hierarchy import builders as b

from finops.api import views
from finops.hierarchy import family, refs, subscriptions

TREE = [  # (name, offering, parent): the compatibility-and-hierarchy page's family
    ("acme-bundle", "platform-core", None),
    ("acme-vm", "vm-standard", "acme-bundle"),
    ("acme-disk", "vm-disk", "acme-bundle"),
    ("acme-monitor", "monitoring", "acme-bundle"),
    ("acme-alert", "alerting", "acme-monitor"),
    ("acme-vm-spare", "vm-standard", "acme-alert"),
]
REQUIRING = {"acme-disk", "acme-monitor", "acme-alert"}


def acme_cluster() -> b.Cluster:
    cluster = b.Cluster()
    for name in ("platform-core", "vm-standard"):
        cluster.add_offering(b.offering(name))
    for name in ("vm-disk", "monitoring", "alerting"):
        cluster.add_offering(b.offering(name, requires=["vm-standard"]))
    assert all(refs.is_ready(o) for o in cluster.offerings.values())
    return cluster


def active_names(cluster: b.Cluster) -> set[str]:
    return {k.name for k, s in cluster.subs.items() if family.is_active(s)}


class TestTheDocsFamily:
    def test_members_activate_after_their_parent_and_their_provider_in_any_apply_order(
        self,
    ) -> None:
        cluster = acme_cluster()
        order: list[str] = []
        for name, offering, parent in reversed(TREE):
            cluster.create(b.subscription(name, offering, parent=parent))
        while cluster.queue:
            key = cluster.queue.popleft()
            decided = cluster.reconcile(key)
            if decided is not None and decided.activated:
                order.append(key.name)
        position = {name: i for i, name in enumerate(order)}
        assert set(order) == {name for name, _, _ in TREE}
        for name, _, parent in TREE:
            if parent is not None:
                assert position[parent] < position[name], (parent, name)
        for name in REQUIRING:
            assert position["acme-vm"] < position[name]

    def test_every_member_shares_the_roots_uid(self) -> None:
        cluster = acme_cluster()
        for name, offering, parent in TREE:
            cluster.create(b.subscription(name, offering, parent=parent))
        cluster.settle()
        root_uid = cluster.sub("acme-bundle")["metadata"]["uid"]
        assert {s["status"]["compatibilityRoot"] for s in cluster.subs.values()} == {root_uid}

    def test_deleting_acme_vm_ends_exactly_the_three_requiring_members(self) -> None:
        cluster = acme_cluster()
        for name, offering, parent in TREE:
            cluster.create(b.subscription(name, offering, parent=parent))
        cluster.settle()
        cluster.delete("acme-vm")
        cluster.settle()
        lost = {
            k.name
            for k, s in cluster.subs.items()
            if b.reason(s, "Active") == "CompatibilityRequirementNotMet"
        }
        assert lost == REQUIRING
        for name in REQUIRING:
            sub = cluster.sub(name)
            assert sub["status"]["deactivatedAt"]
            assert b.reason(sub, "Ready") == "ValidationSucceeded"
            assert (b.condition(sub, "Active") or {})["message"] == (
                f"required offering {b.NS}/vm-standard not covered by an active subscription "
                "in the family"
            )
        # acme-vm-spare binds vm-standard too but sits below acme-alert: it covers nothing,
        # and goes with its deactivated parent under the default policy.
        assert b.reason(cluster.sub("acme-vm-spare"), "Active") == "ParentDeactivated"
        assert b.reason(cluster.sub("acme-vm"), "Active") == "MarkedForDeletion"
        assert active_names(cluster) == {"acme-bundle"}

    def test_recreating_acme_vm_revives_none_of_them(self) -> None:
        cluster = acme_cluster()
        for name, offering, parent in TREE:
            cluster.create(b.subscription(name, offering, parent=parent))
        cluster.settle()
        cluster.delete("acme-vm")
        cluster.settle()
        cluster.release("acme-vm")
        cluster.settle()
        ended = {
            k.name: s["status"]["deactivatedAt"]
            for k, s in cluster.subs.items()
            if family.is_deactivated(s)
        }
        assert set(ended) == REQUIRING | {"acme-vm-spare"}
        cluster.now = b.T0.replace(hour=12)
        cluster.create(b.subscription("acme-vm", "vm-standard", parent="acme-bundle"))
        cluster.settle()
        assert active_names(cluster) == {"acme-bundle", "acme-vm"}
        for name, at in ended.items():
            assert cluster.sub(name)["status"]["deactivatedAt"] == at
            assert b.reason(cluster.sub(name), "Ready") == "ValidationSucceeded"

    @settings(max_examples=150, deadline=None)
    @given(
        st.permutations(range(len(TREE))),
        st.lists(st.integers(0, 2), min_size=len(TREE), max_size=len(TREE)),
        st.sampled_from([None, *(name for name, _, _ in TREE)]),
        st.randoms(use_true_random=False),
    )
    def test_when_the_queue_drains_no_member_has_work_left(
        self, order: list[int], between: list[int], deleted: str | None, rnd: Any
    ) -> None:
        """The fan-out wakes everyone whose decision a change can move: whatever the create
        order, however the queue is worked through in between, once it drains every member's
        plan is what it carries, and again after a member is deleted."""
        cluster = acme_cluster()
        for i, steps in zip(order, between, strict=True):
            name, offering, parent = TREE[i]
            cluster.create(b.subscription(name, offering, parent=parent))
            for _ in range(min(steps, len(cluster.queue))):
                cluster.reconcile(cluster.queue.popleft())
        cluster.settle(pick=rnd.randrange)
        assert cluster.unsettled() == set()
        assert active_names(cluster) == {name for name, _, _ in TREE}
        if deleted is not None:
            cluster.delete(deleted)
            cluster.settle(pick=rnd.randrange)
            assert cluster.unsettled() == set()

    def test_a_cascade_settles_in_few_passes(self) -> None:
        cluster = acme_cluster()
        for name, offering, parent in TREE:
            cluster.create(b.subscription(name, offering, parent=parent))
        cluster.settle()
        cluster.delete("acme-vm")
        assert cluster.settle() < 10 * len(TREE)


class TestParentCycles:
    def test_two_subscriptions_naming_each_other_wait_forever_without_looping(self) -> None:
        cluster = acme_cluster()
        cluster.create(b.subscription("ping", "platform-core", parent="pong"))
        cluster.create(b.subscription("pong", "platform-core", parent="ping"))
        passes = cluster.settle()
        assert passes <= 6
        for name in ("ping", "pong"):
            sub = cluster.sub(name)
            assert b.reason(sub, "Ready") == "ParentSubscriptionNotReady"
            assert "compatibilityRoot" not in sub["status"]
            assert b.condition(sub, "Active") is None

    def test_root_resolution_refuses_to_loop(self) -> None:
        ping = b.subscription("ping", "x", parent="pong")
        pong = b.subscription("pong", "x", parent="ping")
        root = family.resolve_root(ping, b.lookup_from([ping, pong]))
        assert root.uid is None
        assert "loops" in root.problem


# ---------------------------------------------------------------- coverage as a property


@st.composite
def trees(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A family: member i>0 hangs off some earlier member; offerings and activity drawn."""
    size = draw(st.integers(min_value=1, max_value=12))
    members = []
    for i in range(size):
        parent = None if i == 0 else f"m{draw(st.integers(min_value=0, max_value=i - 1))}"
        offering = draw(st.sampled_from(["o1", "o2", "o3"]))
        status = b.active_status("root") if draw(st.booleans()) else {"compatibilityRoot": "root"}
        members.append(b.subscription(f"m{i}", offering, parent=parent, status=status))
    return members


def ancestors(member: dict[str, Any], by_key: dict[views.Key, dict[str, Any]]) -> set[views.Key]:
    found = set()
    up = family.parent_key(member)
    while up is not None:
        found.add(up)
        up = family.parent_key(by_key[up])
    return found


class TestCoverage:
    @settings(max_examples=200, deadline=None)
    @given(trees(), st.data())
    def test_coverage_never_counts_the_member_or_its_descendants(
        self, members: list[dict[str, Any]], data: st.DataObject
    ) -> None:
        me = data.draw(st.sampled_from(members))
        by_key = {refs.key_of(m): m for m in members}
        candidates = {refs.key_of(c) for c in family.coverage_candidates(me, members)}
        mine = refs.key_of(me)
        descendants = {k for k, m in by_key.items() if mine in ancestors(m, by_key)}
        assert mine not in candidates
        assert not candidates & descendants
        if family.parent_key(me) is None:
            assert candidates == set()
        else:
            assert candidates == set(by_key) - descendants - {mine}

    @settings(max_examples=200, deadline=None)
    @given(trees(), st.data())
    def test_a_requirement_is_covered_exactly_by_an_active_outsider_binding_it(
        self, members: list[dict[str, Any]], data: st.DataObject
    ) -> None:
        me = data.draw(st.sampled_from(members))
        required = views.Key(b.NS, data.draw(st.sampled_from(["o1", "o2", "o3"])))
        outsiders = family.coverage_candidates(me, members)
        covered = any(family.is_active(m) and family.offering_key(m) == required for m in outsiders)
        assert (family.uncovered(me, [required], members) is None) == covered

    def test_uncles_and_cousins_cover_but_a_grandchild_does_not(self) -> None:
        root = b.subscription("root", "core", status=b.active_status("r"))
        uncle = b.subscription("uncle", "vm", parent="root", status=b.active_status("r"))
        mid = b.subscription("mid", "x", parent="root", status=b.active_status("r"))
        me = b.subscription("me", "needs-vm", parent="mid", status={"compatibilityRoot": "r"})
        cousin_side = b.subscription("aunt", "y", parent="root", status=b.active_status("r"))
        cousin = b.subscription("cousin", "db", parent="aunt", status=b.active_status("r"))
        child = b.subscription("child", "x", parent="me", status=b.active_status("r"))
        grandchild = b.subscription("gc", "cache", parent="child", status=b.active_status("r"))
        members = [root, uncle, mid, me, cousin_side, cousin, child, grandchild]
        need = [views.Key(b.NS, "vm"), views.Key(b.NS, "db"), views.Key(b.NS, "core")]
        assert family.uncovered(me, need, members) is None
        assert family.uncovered(me, [views.Key(b.NS, "cache")], members) == views.Key(b.NS, "cache")

    def test_a_provider_that_is_not_ready_still_covers(self) -> None:
        root = b.subscription("root", "core", status=b.active_status("r"))
        vm_status = {**b.active_status("r"), "ready": "False"}
        vm = b.subscription("vm", "vm", parent="root", status=vm_status)
        me = b.subscription("me", "disk", parent="root", status={"compatibilityRoot": "r"})
        assert family.uncovered(me, [views.Key(b.NS, "vm")], [root, vm, me]) is None

    def test_a_deactivated_provider_does_not_cover(self) -> None:
        root = b.subscription("root", "core", status=b.active_status("r"))
        ended = {**b.active_status("r"), "deactivatedAt": "2026-08-12T09:30:00Z"}
        vm = b.subscription("vm", "vm", parent="root", status=ended)
        me = b.subscription("me", "disk", parent="root", status={"compatibilityRoot": "r"})
        assert family.uncovered(me, [views.Key(b.NS, "vm")], [root, vm, me]) == views.Key(
            b.NS, "vm"
        )


class TestFanout:
    def test_create_delete_and_activation_flips_fan_out_to_family_and_children(self) -> None:
        sub = b.subscription("s", "o", parent="p", status={"compatibilityRoot": "r"})
        active = {**sub, "status": b.active_status("r")}
        deleting = {**active, "metadata": {**active["metadata"], "deletionTimestamp": "x"}}
        me = views.Key(b.NS, "s")
        ended = {**active, "status": {**active["status"], "deactivatedAt": "x"}}
        assert subscriptions.fanout(None, sub) == subscriptions.Fanout("r", me)
        assert subscriptions.fanout(sub, None) == subscriptions.Fanout("r", me)
        assert subscriptions.fanout(sub, active) == subscriptions.Fanout("r", me, activation=True)
        assert subscriptions.fanout(active, ended) == subscriptions.Fanout("r", me)
        assert subscriptions.fanout(active, deleting) == subscriptions.Fanout("r", me)

    def test_an_activation_reaches_the_members_that_never_activated_and_the_children(
        self,
    ) -> None:
        """A member turning active only adds coverage: members already active (or ended)
        cannot decide differently because of it."""
        vm = b.subscription("vm", "o", parent="root", status=b.active_status("r"))
        waiting = b.subscription("disk", "o", parent="root", status={"compatibilityRoot": "r"})
        up = b.subscription("mon", "o", parent="root", status=b.active_status("r"))
        ended = b.subscription("old", "o", parent="root", status=b.active_status("r"))
        ended["status"]["deactivatedAt"] = "2026-08-12T09:00:00Z"
        kid = b.subscription("kid", "o", parent="vm", status=b.active_status("r"))
        snapshot = [vm, waiting, up, ended, kid]
        change = subscriptions.fanout({**vm, "status": {"compatibilityRoot": "r"}}, vm)
        assert change is not None and change.activation
        reached = subscriptions.requeue(change, b.members_from(snapshot), b.children_from(snapshot))
        assert reached == {views.Key(b.NS, "disk"), views.Key(b.NS, "kid")}
        gone = subscriptions.fanout(vm, None)
        assert gone is not None
        everyone = subscriptions.requeue(gone, b.members_from(snapshot), b.children_from(snapshot))
        assert everyone == {refs.key_of(s) for s in snapshot}

    def test_routine_status_writes_fan_out_to_nobody(self) -> None:
        old = b.subscription("s", "o", status=b.active_status("r"))
        new = {**old, "status": {**old["status"], "costs": [{"granularity": "hour"}]}}
        assert subscriptions.fanout(old, new) is None
        assert b.is_routine_status_write(old, new)

    def test_a_spec_edit_is_not_routine_but_does_not_fan_out(self) -> None:
        old = b.subscription("s", "o", status=b.active_status("r"))
        new = {**old, "metadata": {**old["metadata"], "generation": 2}}
        assert subscriptions.fanout(old, new) is None
        assert not b.is_routine_status_write(old, new)

    def test_a_member_without_a_root_reaches_only_its_children(self) -> None:
        parent = b.subscription("p", "o")
        child = b.subscription("c", "o", parent="p")
        change = subscriptions.fanout(None, parent)
        assert change is not None and change.root is None
        snapshot = [parent, child]
        reached = subscriptions.requeue(change, b.members_from(snapshot), b.children_from(snapshot))
        assert reached == {views.Key(b.NS, "c")}


class TestCascades:
    def db_cluster(self, backup_lifecycle: dict[str, Any] | None, requires: list[str]) -> b.Cluster:
        cluster = b.Cluster()
        cluster.add_offering(b.offering("db-standard"))
        cluster.add_offering(
            b.offering("db-backup", requires=requires, lifecycle={"onParentDeactivate": "Orphan"})
        )
        cluster.create(b.subscription("acme-db", "db-standard"))
        cluster.create(
            b.subscription(
                "acme-db-backup", "db-backup", parent="acme-db", lifecycle=backup_lifecycle
            )
        )
        cluster.settle()
        return cluster

    def test_an_orphan_stays_up_when_its_parent_is_deleted(self) -> None:
        cluster = self.db_cluster({"onParentDeactivate": "Orphan"}, requires=[])
        cluster.delete("acme-db")
        cluster.settle()
        backup = cluster.sub("acme-db-backup")
        assert (b.reason(backup, "Ready"), b.reason(backup, "Active")) == ("Orphaned", "Orphaned")
        assert backup["status"]["ready"] == "True"
        cluster.release("acme-db")
        cluster.settle()
        assert b.reason(cluster.sub("acme-db-backup"), "Active") == "Orphaned"

    def test_the_offerings_orphan_policy_applies_without_a_lifecycle_block(self) -> None:
        cluster = self.db_cluster(None, requires=[])
        cluster.delete("acme-db")
        cluster.settle()
        assert b.reason(cluster.sub("acme-db-backup"), "Active") == "Orphaned"

    def test_an_orphan_whose_only_provider_was_its_parent_is_ended_for_the_gap(self) -> None:
        cluster = b.Cluster()
        cluster.add_offering(b.offering("core"))
        cluster.add_offering(b.offering("db-standard"))
        cluster.add_offering(
            b.offering(
                "db-backup", requires=["db-standard"], lifecycle={"onParentDeactivate": "Orphan"}
            )
        )
        cluster.create(b.subscription("root", "core"))
        cluster.create(b.subscription("acme-db", "db-standard", parent="root"))
        cluster.create(b.subscription("acme-db-backup", "db-backup", parent="acme-db"))
        cluster.settle()
        assert family.is_active(cluster.sub("acme-db-backup"))
        cluster.delete("acme-db")
        cluster.settle()
        backup = cluster.sub("acme-db-backup")
        assert b.reason(backup, "Active") == "CompatibilityRequirementNotMet"

    def test_deactivate_cascades_through_every_level(self) -> None:
        cluster = acme_cluster()
        for name, offering, parent in TREE:
            cluster.create(b.subscription(name, offering, parent=parent))
        cluster.settle()
        cluster.delete("acme-bundle")
        cluster.settle()
        assert active_names(cluster) == set()
        by_reason = {k.name: b.reason(s, "Active") for k, s in cluster.subs.items()}
        assert by_reason["acme-bundle"] == "MarkedForDeletion"
        assert by_reason["acme-vm"] == "ParentDeactivated"
        assert by_reason["acme-monitor"] == "ParentDeactivated"
        assert by_reason["acme-alert"] == "ParentDeactivated"
        assert by_reason["acme-vm-spare"] == "ParentDeactivated"
