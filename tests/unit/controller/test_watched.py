"""The watch stores' projection keeps every field a reader reads: each decision, wake-up rule,
mirror version, Event and metric computed from projected objects equals the one computed from
the objects as the API server sent them, over generated forests."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.hierarchy import builders as b

from finops.api import views
from finops.controller import caches, cost_metrics, hierarchy_watch, ledger_mirror, watched
from finops.controller import subscription as subscription_reconciler
from finops.hierarchy import family, offerings, refs, subscriptions
from finops.kube import events, finalizers

LAST = subscriptions.LAST_APPLIED
NAMES = [f"s{i}" for i in range(6)]
OFFERS = ["core", "vm", "disk", "gone"]
POLICY = st.sampled_from([None, "Deactivate", "Orphan"])
FIELDS_POLICY = {"f:spec": {"f:lifecycle": {"f:onParentDeactivate": {}, "f:targetRef": {}}}}
FIELDS_OTHER = {"f:metadata": {"f:labels": {".": {}}}, "f:spec": {"f:offeringRef": {}}}


@st.composite
def last_applied(draw: st.DrawFn, policy: str | None) -> str | None:
    """kubectl's annotation: the manifest with or without the policy, or something odd."""
    kind = draw(st.sampled_from(["none", "manifest", "bare", "empty", "junk", "list", "odd"]))
    manifest: dict[str, Any] = {"spec": {"offeringRef": {"name": "vm"}}}
    if policy is not None and draw(st.booleans()):
        manifest["spec"]["lifecycle"] = {"onParentDeactivate": policy}
    return {
        "none": None,
        "manifest": json.dumps(manifest),
        "bare": json.dumps({"spec": {"lifecycle": {"targetRef": {"kind": "Pod"}}}}),
        "empty": "",
        "junk": "{not json",
        "list": "[1, 2]",
        "odd": json.dumps({"spec": {"lifecycle": ["x"]}}),
    }[kind]


ENTRY = st.fixed_dictionaries(
    {
        "manager": st.sampled_from(["kubectl", "argocd", "finops-operator"]),
        "operation": st.sampled_from(["Apply", "Update"]),
        "fieldsV1": st.sampled_from([FIELDS_POLICY, FIELDS_OTHER, {}]),
        "time": st.just("2026-08-12T08:00:00Z"),
    },
    optional={"subresource": st.sampled_from(["status", ""])},
)


@st.composite
def full_metadata(draw: st.DrawFn, obj: dict[str, Any], policy: str | None) -> None:
    """Everything the API server adds to an object's metadata, some of it odd."""
    meta = obj["metadata"]
    meta["resourceVersion"] = str(draw(st.integers(1, 10**6)))
    meta["generation"] = draw(st.integers(1, 3))
    meta["managedFields"] = draw(st.lists(ENTRY, max_size=4))
    annotations = draw(st.dictionaries(st.sampled_from(["a", "team"]), st.text(max_size=3)))
    last = draw(last_applied(policy))
    if last is not None:
        annotations[LAST] = last
    if annotations or draw(st.booleans()):
        meta["annotations"] = annotations
    if draw(st.booleans()):
        meta["labels"] = {"team": draw(st.sampled_from(["a", "b"]))}
    if draw(st.booleans()):
        meta["finalizers"] = [subscriptions.FINALIZER, offerings.FINALIZER][
            : draw(st.integers(0, 2))
        ]
    if draw(st.integers(0, 4)) == 0:
        meta["deletionTimestamp"] = "2026-08-12T08:45:00Z"
        meta["deletionGracePeriodSeconds"] = 0


@st.composite
def a_subscription(draw: st.DrawFn, name: str) -> dict[str, Any]:
    policy = draw(POLICY)
    lifecycle: dict[str, Any] | None = None
    if policy is not None or draw(st.booleans()):
        lifecycle = {"onParentDeactivate": policy} if policy else {}
        if draw(st.booleans()):
            lifecycle["targetRef"] = {"apiVersion": "v1", "kind": "Pod", "name": "p"}
    parent = draw(st.sampled_from([None, *NAMES]))
    status: dict[str, Any] | None = draw(
        st.sampled_from(
            [
                None,
                b.active_status("s0"),
                {**b.active_status("s0"), "deactivatedAt": "2026-08-12T08:40:00Z"},
                {"ready": "False", "conditions": [{"type": "Ready", "status": "False"}]},
            ]
        )
    )
    if status is not None and draw(st.booleans()):
        part = {"name": "fee", "current": 1_000_000, "projected": 3_000_000}
        status = {**status, "costs": [{"granularity": "monthly", "breakdown": [part]}]}
    sub = b.subscription(
        name,
        draw(st.sampled_from(OFFERS)),
        parent=None if parent == name else parent,
        lifecycle=lifecycle,
        status=copy.deepcopy(status),
    )
    draw(full_metadata(sub, policy))
    return sub


@st.composite
def an_offering(draw: st.DrawFn, name: str) -> dict[str, Any]:
    requires = draw(st.lists(st.sampled_from(OFFERS), max_size=2, unique=True))
    lifecycle = draw(
        st.sampled_from(
            [
                None,
                {"onParentDeactivate": "Orphan"},
                {"onParentDeactivate": "Orphan", "allowOverride": False},
            ]
        )
    )
    offer = b.offering(
        name,
        requires=[r for r in requires if r != name],
        lifecycle=copy.deepcopy(lifecycle),
        ready=draw(st.sampled_from([None, "True", "False"])),
    )
    draw(full_metadata(offer, None))
    return offer


@st.composite
def forests(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    offers = [draw(an_offering(n)) for n in OFFERS[:3]]
    subs = [draw(a_subscription(n)) for n in NAMES[: draw(st.integers(1, len(NAMES)))]]
    return offers, subs


def stores(offers: list[dict[str, Any]], subs: list[dict[str, Any]], project: Any) -> caches.Caches:
    """The caches as the manager builds them, fed through the watch handlers' index updates."""
    c = caches.Caches({}, {}, {})
    for o in offers:
        kept = project(o)
        c.offerings[refs.key_of(kept)] = kept
        c.offering_changed(None, kept)
    for s in subs:
        kept = project(s)
        c.subscriptions[refs.key_of(kept)] = kept
        c.subscription_changed(None, kept)
    return c


def sub_plan(c: caches.Caches, key: views.Key, target: Any) -> subscriptions.SubscriptionPlan:
    sub = c.subscriptions[key]
    offering_key = family.offering_key(sub)
    return subscriptions.plan(
        sub,
        offering=c.offering(offering_key) if offering_key else None,
        lookup=c.subscription,
        members=c.members,
        target=target,
        now=b.T0,
    )


def offering_plan(c: caches.Caches, key: views.Key) -> offerings.OfferingPlan:
    obj = c.offerings[key]
    return offerings.plan(
        obj,
        lookup=c.offering,
        books=[],
        now=b.T0,
        subscriptions=list(c.subscriptions.values()),
        offerings=list(c.offerings.values()),
    )


def mirror_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The columns the ledger mirror writes for one version (no connection needed)."""
    mirror = ledger_mirror.Mirror.__new__(ledger_mirror.Mirror)
    mirror.cluster = "c"
    return mirror._version(obj, obj.get("spec") or {}).columns()


def readers(obj: dict[str, Any]) -> tuple[Any, ...]:
    """What the edges read of one object: Event, finalizer patches, mirror rows, policy."""
    return (
        events.event_body(obj, "Normal", "R", "m", b.T0),
        finalizers.add_ops(obj, subscriptions.FINALIZER),
        finalizers.remove_ops(obj, offerings.FINALIZER),
        ledger_mirror.offering_version(obj),
        ledger_mirror.subscription_version(obj, {"ns": "x"}),
        ledger_mirror.subscription_labels(obj),
        mirror_fields(obj),
        subscriptions.explicit_on_parent_deactivate(obj),
        subscriptions.needs_finalizer(obj),
        offerings.needs_finalizer(obj),
        subscription_reconciler.watches_target(obj),
        obj.get("status"),
    )


class TestTheProjectionKeepsWhatReadersRead:
    @settings(max_examples=150, deadline=None)
    @given(forests())
    def test_a_kept_subscription_is_parsed_once_into_the_view_of_the_whole_object(
        self, forest: tuple[list[dict[str, Any]], list[dict[str, Any]]]
    ) -> None:
        _, subs = forest
        for sub in subs:
            kept = watched.hierarchy_object(sub)
            view = views.SubscriptionView.parse(kept)
            assert views.SubscriptionView.parse(kept) is view  # parsed once
            assert view == views.SubscriptionView.parse(sub)
            assert view == views.SubscriptionView.parse(dict(kept))
            for copied in (dict(kept), copy.copy(kept), copy.deepcopy(kept)):
                assert type(copied) is dict and copied == kept  # a copy may be modified

    @settings(max_examples=150, deadline=None)
    @given(forests(), st.sampled_from([None, subscriptions.Target.FOUND]))
    def test_every_decision_equals_the_one_on_whole_objects(
        self, forest: tuple[list[dict[str, Any]], list[dict[str, Any]]], target: Any
    ) -> None:
        offers, subs = forest
        whole = stores(offers, subs, whole_object)
        kept = stores(offers, subs, watched.hierarchy_object)
        for key in whole.subscriptions:
            assert sub_plan(kept, key, target) == sub_plan(whole, key, target)
            assert readers(kept.subscriptions[key]) == readers(whole.subscriptions[key])
        for key in whole.offerings:
            assert offering_plan(kept, key) == offering_plan(whole, key)
            assert readers(kept.offerings[key]) == readers(whole.offerings[key])
        assert cost_metrics.subscription_families(
            kept.subscriptions.values()
        ) == cost_metrics.subscription_families(whole.subscriptions.values())
        for root in ("s0", "s1"):
            assert kept.members(root) == [watched.hierarchy_object(s) for s in whole.members(root)]

    @settings(max_examples=150, deadline=None)
    @given(forests(), st.data())
    def test_every_watch_event_wakes_the_same_keys(
        self, forest: tuple[list[dict[str, Any]], list[dict[str, Any]]], data: st.DataObject
    ) -> None:
        offers, subs = forest
        whole = stores(offers, subs, whole_object)
        kept = stores(offers, subs, watched.hierarchy_object)
        old = data.draw(st.sampled_from(subs))
        new = data.draw(a_subscription(old["metadata"]["name"]))
        for c, project in ((whole, whole_object), (kept, watched.hierarchy_object)):
            c.subscriptions[refs.key_of(new)] = project(new)
            c.subscription_changed(project(old), project(new))
        woken_whole = hierarchy_watch.subscription_wakes(whole, old, new)
        p_old, p_new = watched.hierarchy_object(old), watched.hierarchy_object(new)
        woken_kept = hierarchy_watch.subscription_wakes(kept, p_old, p_new)
        if only_last_applied_differs(old, new):
            # Rewriting kubectl's annotation without changing what decisions read wakes
            # nothing now; waking the object would have planned exactly the same status.
            assert woken_kept <= woken_whole
            key = refs.key_of(new)
            assert sub_plan(kept, key, None) == sub_plan(whole, key, None)
        else:
            assert woken_kept == woken_whole
        o_old = data.draw(st.sampled_from(offers))
        o_new = data.draw(an_offering(o_old["metadata"]["name"]))
        woken = hierarchy_watch.offering_wakes(whole, o_old, o_new)
        p = watched.hierarchy_object
        if not only_last_applied_differs(o_old, o_new):
            assert hierarchy_watch.offering_wakes(kept, p(o_old), p(o_new)) == woken


def only_last_applied_differs(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """The annotations differ, but not once the last-applied one is cut down."""
    o, n = old["metadata"].get("annotations"), new["metadata"].get("annotations")
    p_o = watched.hierarchy_object(old)["metadata"].get("annotations")
    p_n = watched.hierarchy_object(new)["metadata"].get("annotations")
    return o != n and p_o == p_n


class TestWhatIsDropped:
    def test_managed_fields_and_the_applied_manifest_are_cut_down(self) -> None:
        sub = b.subscription("s", "vm", lifecycle={"onParentDeactivate": "Deactivate"})
        manifest = {"spec": {"lifecycle": {"onParentDeactivate": "Deactivate"}}, "x": "y" * 500}
        sub["metadata"]["annotations"] = {LAST: json.dumps(manifest), "team": "a"}
        sub["metadata"]["managedFields"] = [
            {"manager": "kubectl", "operation": "Update", "fieldsV1": FIELDS_OTHER},
            {"manager": "op", "operation": "Update", "subresource": "status", "fieldsV1": {}},
        ]
        kept = watched.hierarchy_object(sub)
        assert "creationTimestamp" not in kept["metadata"]
        assert kept["metadata"]["annotations"]["team"] == "a"
        assert len(kept["metadata"]["annotations"][LAST]) < 60
        assert len(kept["metadata"]["managedFields"]) == 1
        assert subscriptions.explicit_on_parent_deactivate(kept) == "Deactivate"

    def test_repeated_strings_are_held_once(self) -> None:
        one = watched.hierarchy_object(b.subscription("a", "vm", namespace="team-" + "x" * 5))
        two = watched.hierarchy_object(b.subscription("b", "vm", namespace="team-" + "x" * 5))
        assert one["metadata"]["namespace"] is two["metadata"]["namespace"]
        assert one["spec"]["offeringRef"]["name"] is two["spec"]["offeringRef"]["name"]

    def test_a_namespace_keeps_its_name_and_labels(self) -> None:
        ns = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "t", "labels": {"a": "b"}, "managedFields": [{}], "uid": "u"},
            "spec": {"finalizers": ["kubernetes"]},
        }
        assert watched.namespace(ns) == {"metadata": {"name": "t", "labels": {"a": "b"}}}


def whole_object(obj: dict[str, Any]) -> dict[str, Any]:
    """The whole object: what a store keeps without a projection."""
    return obj
