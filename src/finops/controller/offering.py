"""Offering reconciler: finalizer, readiness with resolved pricing, the deletion guard, mirror.

Checklist per Offering (observe from the watch caches, decide with `hierarchy.offerings.plan`):
1. add our finalizer once (JSON patch guarded by resourceVersion);
2. plan: requirement graph, each requirement, pricing against the active book (kept once
   resolved); while deleting, the guard over every Subscription and Offering still pointing
   at it;
3. write the status when it changed, record the plan's Events (blocked deletions);
4. drop the finalizer when the guard allows;
5. mirror this version into the ledger (never blocks 1-4; a failure requeues the key).

Who wakes a waiting Offering (see `hierarchy_watch`): a requirement appearing or flipping
readiness, a PriceBook change while unresolved, a dependent going away while deleting.
"""

from __future__ import annotations

import datetime as dt
import logging

import lightkube

from finops.api import bodies, views
from finops.controller import caches as caches_
from finops.controller import ledger_mirror
from finops.hierarchy import offerings, refs
from finops.kube import client as kube_client
from finops.kube import events, finalizers, resources, status

log = logging.getLogger(__name__)

CONTROLLER = "offering"  # the documented metrics label (no suffix)
KIND = "Offering"
CONFLICT_RETRY = 0.2
"""Seconds before retrying a write that lost a resourceVersion race (the cache was stale)."""


class OfferingReconciler:
    """One Offering per key ("Offering", namespace, name)."""

    controller = CONTROLLER

    def __init__(
        self,
        client: lightkube.AsyncClient,
        caches: caches_.Caches,
        mirror: ledger_mirror.Mirror | None = None,
    ) -> None:
        self.client = client
        self.caches = caches
        self.mirror = mirror
        self.backoff = ledger_mirror.Backoff()

    async def reconcile(self, key: tuple[str, str, str]) -> float | None:
        _, namespace, name = key
        obj = self.caches.offering(views.Key(namespace, name))
        if obj is None:
            self.backoff.succeeded(key)
            return None
        try:
            obj = await self._sync(obj)
        except lightkube.ApiError as exc:
            code = kube_client.status_code(exc)
            if code == 404:
                return None
            if code in finalizers.CONFLICT_CODES:
                return CONFLICT_RETRY
            raise
        return await self._mirror(key, obj)

    async def _sync(self, obj: bodies.OfferingBody) -> bodies.OfferingBody:
        if offerings.needs_finalizer(obj):
            obj = (
                await finalizers.add(self.client, resources.Offering, obj, offerings.FINALIZER)
                or obj
            )
        deleting = refs.is_deleting(obj)
        decided = offerings.plan(
            obj,
            lookup=self.caches.offering,
            books=list(self.caches.books.values()),
            now=dt.datetime.now(dt.UTC),
            subscriptions=list(self.caches.subscriptions.values()) if deleting else (),
            offerings=list(self.caches.offerings.values()) if deleting else (),
        )
        if decided.changed:
            obj = bodies.as_offering(
                await status.write(self.client, resources.Offering, obj, decided.status)
            )
        for event in decided.events:
            await events.record(self.client, obj, event.type, event.reason, event.message)
        if decided.release_finalizer:
            await finalizers.remove(self.client, resources.Offering, obj, offerings.FINALIZER)
            log.info("offering released", extra={"offering": str(refs.key_of(obj))})
        return obj

    async def _mirror(self, key: tuple[str, str, str], obj: bodies.OfferingBody) -> float | None:
        mirror = self.mirror
        if mirror is None:
            return None
        return await ledger_mirror.mirrored(self.backoff, key, lambda: mirror.offering(obj))
