"""Objects as the API server returns them, and a tiny in-memory cluster that runs the decisions.

The cluster is no mock of Kubernetes: it holds plain dicts, calls the pure functions the
reconcilers will call, writes back the status they return, and re-queues exactly what
`subscriptions.fanout` asks for through the two indexes.
"""

from __future__ import annotations

import collections
import copy
import datetime as dt
import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from finops.api import views
from finops.hierarchy import family, offerings, refs, subscriptions

NS = "finops-operator-system"
T0 = dt.datetime(2026, 8, 12, 9, 0, tzinfo=dt.UTC)
_uids = itertools.count(1)


def ref(name: str, namespace: str = NS) -> dict[str, str]:
    return {"name": name, "namespace": namespace}


def meta(name: str, namespace: str = NS, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}-{next(_uids)}",
        "generation": 1,
        "creationTimestamp": "2026-08-12T08:00:00Z",
        **extra,
    }


FEE = {"period": "1h", "tickAlignment": "ActivatedAt", "priceMicros": 30000000}


def offering(
    name: str,
    *,
    requires: Iterable[str] = (),
    fee: Mapping[str, Any] | None = FEE,
    meters: list[dict[str, Any]] | None = None,
    lifecycle: dict[str, Any] | None = None,
    ready: str | None = None,
    namespace: str = NS,
) -> dict[str, Any]:
    pricing: dict[str, Any] = {}
    if fee is not None:
        pricing["subscriptionFee"] = dict(fee)
    if meters is not None:
        pricing["resourcePricing"] = meters
    spec: dict[str, Any] = {"pricing": pricing}
    required = list(requires)
    if required:
        spec["compatibility"] = {"requiredOfferings": [ref(r) for r in required]}
    if lifecycle is not None:
        spec["lifecycle"] = lifecycle
    obj: dict[str, Any] = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "Offering",
        "metadata": meta(name, namespace),
        "spec": spec,
    }
    if ready is not None:
        obj["status"] = {"ready": ready}
    return obj


def subscription(
    name: str,
    offering_name: str,
    *,
    parent: str | None = None,
    lifecycle: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    namespace: str = NS,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"offeringRef": ref(offering_name)}
    if parent is not None:
        spec["parent"] = {"subscriptionRef": ref(parent)}
    if lifecycle is not None:
        spec["lifecycle"] = lifecycle
    obj: dict[str, Any] = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "Subscription",
        "metadata": meta(name, namespace),
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


def active_status(root: str, at: str = "2026-08-12T08:30:00Z") -> dict[str, Any]:
    """What an activated Subscription carries (as the plan writes it)."""
    return {"ready": "True", "activatedAt": at, "compatibilityRoot": root}


def book(
    name: str,
    rates: Mapping[str, str],
    *,
    active: bool = True,
    mode: str = "currency",
    ready: str = "True",
    created: str = "2026-08-01T00:00:00Z",
    annotated: bool = False,
) -> dict[str, Any]:
    metadata = meta(name)
    metadata["creationTimestamp"] = created
    if annotated:
        metadata["annotations"] = {"finops.stakater.com/active": "true"}
    return {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "PriceBook",
        "metadata": metadata,
        "spec": {"currency": "USD", "valuationMode": mode, "rates": dict(rates)},
        "status": {"active": active, "ready": ready},
    }


def condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == type_:
            return dict(cond)
    return None


def reason(obj: Mapping[str, Any], type_: str) -> str | None:
    found = condition(obj, type_)
    return None if found is None else str(found["reason"])


class Cluster:
    """Offerings, Subscriptions and targets in memory, driven by the pure decisions."""

    def __init__(self, now: dt.datetime = T0) -> None:
        self.now = now
        self.offerings: dict[views.Key, dict[str, Any]] = {}
        self.subs: dict[views.Key, dict[str, Any]] = {}
        self.targets: set[tuple[str, str, str, str]] = set()
        self.queue: collections.deque[views.Key] = collections.deque()
        self.passes = 0

    # -- writes an API client would make

    def add_offering(self, obj: dict[str, Any]) -> None:
        key = refs.key_of(obj)
        self.offerings[key] = obj
        for _ in range(3):  # requirements settle in declaration order within a few passes
            for k in list(self.offerings):
                self._reconcile_offering(k)

    def _reconcile_offering(self, key: views.Key) -> None:
        obj = self.offerings[key]
        decided = offerings.plan(obj, lookup=self.offerings.get, books=(), now=self.now)
        if decided.changed:
            obj["status"] = decided.status

    def create(self, obj: dict[str, Any]) -> None:
        key = refs.key_of(obj)
        assert key not in self.subs
        self.subs[key] = obj
        self._watch(None, obj)
        self.queue.append(key)

    def delete(self, name: str) -> None:
        """`kubectl delete`: the finalizer keeps the object, with a deletion timestamp."""
        key = views.Key(NS, name)
        old = copy.deepcopy(self.subs[key])
        self.subs[key]["metadata"]["deletionTimestamp"] = refs.timestamp(self.now)
        self._watch(old, self.subs[key])
        self.queue.append(key)

    def release(self, name: str) -> None:
        """The charge job removes the finalizer and the object goes away."""
        old = self.subs.pop(views.Key(NS, name))
        self._watch(old, None)

    # -- the controller

    def _watch(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        change = subscriptions.fanout(old, new)
        if change is None:
            return
        snapshot = list(self.subs.values())
        self.queue.extend(
            sorted(subscriptions.requeue(change, members_from(snapshot), children_from(snapshot)))
        )

    def target_of(self, sub: Mapping[str, Any]) -> subscriptions.TargetObserved:
        ref_ = subscriptions.target_ref(sub)
        if ref_ is None:
            return None
        key = (ref_.api_version, ref_.kind, ref_.namespace, ref_.name)
        return subscriptions.Target.FOUND if key in self.targets else subscriptions.Target.NOT_FOUND

    def plan(self, obj: dict[str, Any]) -> subscriptions.SubscriptionPlan:
        """What a reconcile of `obj` decides on the cluster as it is now."""
        offering_key = family.offering_key(obj)
        return subscriptions.plan(
            obj,
            offering=self.offerings.get(offering_key) if offering_key else None,
            lookup=self.subs.get,
            members=members_from(list(self.subs.values())),
            target=self.target_of(obj),
            now=self.now,
        )

    def reconcile(self, key: views.Key) -> subscriptions.SubscriptionPlan | None:
        obj = self.subs.get(key)
        if obj is None:
            return None
        self.passes += 1
        decided = self.plan(obj)
        if decided.changed:
            old = copy.deepcopy(obj)
            obj["status"] = decided.status
            self._watch(old, obj)
        return decided

    def settle(self, limit: int = 500, pick: Callable[[int], int] | None = None) -> int:
        """Drain the queue; the number of passes it took (fails if it does not settle).
        `pick(n)` chooses which of the n queued keys goes next (default: the oldest)."""
        start = self.passes
        while self.queue:
            assert self.passes - start < limit, "the family did not settle"
            at = pick(len(self.queue)) if pick is not None else 0
            key = self.queue[at]
            del self.queue[at]
            self.reconcile(key)
        return self.passes - start

    def unsettled(self) -> set[str]:
        """The Subscriptions a reconcile would still write (none once wake-ups missed none)."""
        return {key.name for key, obj in self.subs.items() if self.plan(obj).changed}

    def sub(self, name: str) -> dict[str, Any]:
        return self.subs[views.Key(NS, name)]


# Indexes over a snapshot of objects (the controller keeps live ones in its watch caches).


def lookup_from(objs: Iterable[Mapping[str, Any]]) -> refs.Lookup:
    """A lookup over a snapshot of objects (a cache, or a test's cluster)."""
    table = {refs.key_of(o): o for o in objs}
    return table.get


def members_from(objs: Iterable[Mapping[str, Any]]) -> family.Members:
    """A family index over a snapshot of Subscriptions (what the controller keeps live)."""
    index: dict[str, list[Mapping[str, Any]]] = collections.defaultdict(list)
    for obj in objs:
        root = family.root_of(obj)
        if root:
            index[root].append(obj)

    def members(root: str) -> list[Mapping[str, Any]]:
        return list(index.get(root, ()))

    return members


def children_from(objs: Iterable[Mapping[str, Any]]) -> family.Children:
    """A parent index over a snapshot of Subscriptions.

    The family index alone cannot wake a child waiting on its parent: stamping follows the
    parent gate, so such a child carries no root yet and belongs to no family.
    """
    index: dict[views.Key, list[Mapping[str, Any]]] = collections.defaultdict(list)
    for obj in objs:
        up = family.parent_key(obj)
        if up is not None:
            index[up].append(obj)

    def children(key: views.Key) -> list[Mapping[str, Any]]:
        return list(index.get(key, ()))

    return children


def is_routine_status_write(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """An update that changed only status, and not the activation state: no fan-out, and
    nothing for this object's own reconciler to do either."""
    if old is None or new is None:
        return False
    return subscriptions.fanout(old, new) is None and refs.generation_of(old) == refs.generation_of(
        new
    )
