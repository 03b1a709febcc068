"""Watches, indexes and fan-out for Offerings and Subscriptions, and their two reconcilers.

Every watch event updates the indexes first, then decides whom to wake:
- a Subscription created, deleted, or ending re-queues its whole family (the
  `status.compatibilityRoot` index) and every child naming it as parent (children waiting on
  their parent carry no root yet); turning active, it re-queues its children and the members
  that have never activated (it only adds coverage); its readiness flipping wakes its
  children too; its root being stamped wakes itself (a member may have activated before it
  was indexed); routine status writes (cost buckets, conditions) wake nobody;
- an Offering appearing, disappearing or flipping readiness wakes the Subscriptions bound to
  it and the Offerings requiring it; while a dependent goes away, an Offering being deleted
  is woken to re-check its guard;
- a PriceBook change wakes every Offering whose pricing is still unresolved;
- a Namespace relabelled wakes its Subscriptions (their mirror rows carry the labels).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import lightkube
from lightkube.resources import core_v1

from finops.api import bodies
from finops.controller import caches as caches_
from finops.controller import (
    config,
    ledger_mirror,
    offering,
    subscription,
    watched,
    written,
)
from finops.hierarchy import family, offerings, refs, subscriptions
from finops.kube import events, resources, watch

log = logging.getLogger(__name__)

Key = tuple[str, str, str]
TARGET_RECHECK_CAP = 60.0
B = TypeVar("B", bodies.OfferingBody, bodies.SubscriptionBody)


def _meta(obj: bodies.Object | None) -> bodies.ObjectMetaBody:
    return (obj or {}).get("metadata") or {}


def beyond_status(old: B | None, new: B | None) -> bool:
    """The object's own reconciler has work: created, or anything but status changed."""
    if new is None:
        return False
    if old is None:
        return True
    o, n = _meta(old), _meta(new)
    return (
        o.get("generation") != n.get("generation")
        or o.get("deletionTimestamp") != n.get("deletionTimestamp")
        or o.get("finalizers") != n.get("finalizers")
        or o.get("labels") != n.get("labels")
        or o.get("annotations") != n.get("annotations")
    )


def deletion_flipped(old: B | None, new: B | None) -> bool:
    """Created, gone, or the deletion timestamp appeared."""
    if old is None or new is None:
        return True
    return refs.is_deleting(old) != refs.is_deleting(new)


def book_changed(old: bodies.PriceBookBody | None, new: bodies.PriceBookBody | None) -> bool:
    """A PriceBook change that can let an unresolved Offering resolve (or stop it)."""
    if old is None or new is None:
        return True
    o: bodies.PriceBookStatusBody = old.get("status") or {}
    n: bodies.PriceBookStatusBody = new.get("status") or {}
    return (
        old.get("spec") != new.get("spec")
        or o.get("active") != n.get("active")
        or o.get("ready") != n.get("ready")
    )


def labels_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """A Namespace's labels changed (Namespaces are kept as raw JSON)."""
    if new is None:
        return False
    return old is None or (old.get("metadata") or {}).get("labels") != (
        new.get("metadata") or {}
    ).get("labels")


def joined_family(old: bodies.SubscriptionBody | None, new: bodies.SubscriptionBody | None) -> bool:
    """The Subscription's `status.compatibilityRoot` was just stamped (or changed).

    Its reconcile read the family through the index before the stamp reached the cache, so a
    member activating in between woke the family without it: it must look once more.
    """
    if old is None or new is None:
        return False
    return family.root_of(old) != family.root_of(new)


def subscription_wakes(
    caches: caches_.Caches, old: bodies.SubscriptionBody | None, new: bodies.SubscriptionBody | None
) -> set[Key]:
    """The keys one Subscription watch event re-queues (indexes already updated)."""
    either = new if new is not None else old
    if either is None:
        return set()
    me = refs.key_of(either)
    wake: set[Key] = set()
    if beyond_status(old, new) or joined_family(old, new):
        wake.add((subscription.KIND, *me))
    change = subscriptions.fanout(old, new)
    if change is not None:
        reached = subscriptions.requeue(change, caches.members, caches.children)
        wake.update((subscription.KIND, *k) for k in reached)
        if new is not None:
            wake.add((subscription.KIND, *me))
    if old is not None and new is not None and refs.is_ready(old) != refs.is_ready(new):
        wake.update((subscription.KIND, *refs.key_of(c)) for c in caches.children(me))
    if deletion_flipped(old, new):
        bound = family.offering_key(either)
        if bound is not None:
            target = caches.offering(bound)
            if target is not None and refs.is_deleting(target):
                wake.add((offering.KIND, *bound))
    return wake


def offering_wakes(
    caches: caches_.Caches, old: bodies.OfferingBody | None, new: bodies.OfferingBody | None
) -> set[Key]:
    """The keys one Offering watch event re-queues (indexes already updated)."""
    either = new if new is not None else old
    if either is None:
        return set()
    me = refs.key_of(either)
    wake: set[Key] = set()
    if beyond_status(old, new):
        wake.add((offering.KIND, *me))
    if offerings.readiness_flipped(old, new):
        wake.update((offering.KIND, *k) for k in caches.requirers.keys(me))
        wake.update((subscription.KIND, *k) for k in caches.bound.keys(me))
    if deletion_flipped(old, new):
        for required in offerings.requirements(either):
            found = caches.offering(required)
            if found is not None and refs.is_deleting(found):
                wake.add((offering.KIND, *required))
    return wake


def unresolved_offerings(caches: caches_.Caches) -> set[Key]:
    return {
        (offering.KIND, *k)
        for k, o in caches.offerings.items()
        if offerings.awaits_pricebook(o) and not refs.is_deleting(o)
    }


class Wiring:
    """The sources, caches and reconcilers the manager registers for the two kinds."""

    def __init__(
        self,
        client: lightkube.AsyncClient,
        settings: config.ControllerSettings,
        enqueue: Callable[[Key], None],
        books: Mapping[tuple[str, str], bodies.PriceBookBody],
        *,
        ledger_dsn: str | None = None,
        pending: Callable[[Key], bool] = lambda _key: False,
    ) -> None:
        self.enqueue = enqueue
        self.fresh = written.Written(project=watched.subscription)
        self.events = events.Recorder(client, senders=settings.workers)
        self.offering_source = watch.Source(
            client, resources.Offering, self._on_offering, watched.offering
        )
        self.subscription_source = watch.Source(
            client, resources.Subscription, self._on_subscription, watched.subscription
        )
        self.sources: list[watch.Source[Any]] = [self.offering_source, self.subscription_source]
        namespaces: caches_.NamespaceStore | None = None
        self.mirror: ledger_mirror.Mirror | None = None
        if ledger_dsn is not None:
            self.mirror = ledger_mirror.Mirror(ledger_dsn, settings.cluster_id)
            ns_source = watch.Source(
                client,
                core_v1.Namespace,
                self._on_namespace,
                watched.namespace,
                namespaced=False,
            )
            self.sources.append(ns_source)
            namespaces = ns_source.store
        self.caches = caches_.Caches(
            self.offering_source.store, self.subscription_source.store, books, namespaces
        )
        self.reconcilers: dict[str, Any] = {
            offering.KIND: offering.OfferingReconciler(client, self.caches, self.mirror),
            subscription.KIND: subscription.SubscriptionReconciler(
                client,
                self.caches,
                target_recheck_seconds=min(settings.resync_seconds, TARGET_RECHECK_CAP),
                mirror=self.mirror,
                fresh=self.fresh,
                pending=pending,
                recorder=self.events,
            ),
        }

    def _wake(self, keys: set[Key]) -> None:
        for key in sorted(keys):
            self.enqueue(key)

    def _on_subscription(
        self, kind: str, old: bodies.SubscriptionBody | None, new: bodies.SubscriptionBody | None
    ) -> None:
        self.caches.subscription_changed(old, new)
        self.fresh.seen(old, new)
        self._wake(subscription_wakes(self.caches, old, new))

    def _on_offering(
        self, kind: str, old: bodies.OfferingBody | None, new: bodies.OfferingBody | None
    ) -> None:
        self.caches.offering_changed(old, new)
        self._wake(offering_wakes(self.caches, old, new))

    def _on_namespace(
        self, kind: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> None:
        if labels_changed(old, new) and old is not None:
            ns = watch.object_key(new or {})[1]
            self._wake(
                {(subscription.KIND, n, name) for n, name in self.caches.subscriptions if n == ns}
            )

    def on_pricebook(
        self, old: bodies.PriceBookBody | None, new: bodies.PriceBookBody | None
    ) -> None:
        """Called by the manager's PriceBook handler for every PriceBook event."""
        if book_changed(old, new):
            self._wake(unresolved_offerings(self.caches))

    def resync_keys(self) -> list[Key]:
        keys: list[Key] = [(offering.KIND, ns, name) for ns, name in self.caches.offerings]
        keys.extend((subscription.KIND, ns, name) for ns, name in self.caches.subscriptions)
        return keys

    async def aclose(self) -> None:
        """Send the Events still queued, then close the mirror."""
        await self.events.close()
        self.close()

    def close(self) -> None:
        if self.mirror is not None:
            self.mirror.close()
