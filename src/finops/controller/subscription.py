"""Subscription reconciler: finalizer, the four gates, activation and deactivation, mirror.

Checklist per Subscription (observe from the watch caches plus one GET of the target, decide
with `hierarchy.subscriptions.plan`):
1. add our finalizer once (JSON patch guarded by resourceVersion). The controller never
   removes it: only the charge job does, once the last hours are billed;
2. plan: deletion path, self-references, the Offering, parent, compatibility and target
   gates, activation or terminal deactivation;
3. write the status when it changed and record the plan's Events (activation, orphaning,
   deactivation with its cause); a new Subscription held on a parent or relative that is
   itself waiting in the queue goes back behind it instead (dependency order), and a new
   one whose parent is not there yet waits `PARENT_GRACE` for it first. Reads see
   our own writes before the watch delivers them (`written`). The manager's Events go out
   through a background `events.Recorder`, so a reconcile does not wait for their POST;
4. requeue: a failed read backs off per key; a Subscription with a `targetRef` is re-checked
   periodically, since target deletion is not watched;
5. mirror this version, with its namespace's labels, into the ledger (never blocks 1-4).

Family fan-out (who else is re-queued when this one changes) lives in `hierarchy_watch`.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable

import lightkube
from lightkube.resources import core_v1

from finops.api import bodies, views
from finops.api.reasons import Reason
from finops.controller import caches as caches_
from finops.controller import ledger_mirror, written
from finops.hierarchy import family, refs, subscriptions
from finops.kube import client as kube_client
from finops.kube import events, finalizers, resources, status, targets

log = logging.getLogger(__name__)

CONTROLLER = "subscription"  # the documented metrics label (no suffix)
KIND = "Subscription"
CONFLICT_RETRY = 0.2
"""Seconds before retrying a write that lost a resourceVersion race (the cache was stale)."""
BEHIND = 0.1
"""Requeue delay of a Subscription put back behind a queued blocker: it lands at the tail,
and with many workers the blocker has time to finish its write (whose watch event wakes the
Subscription sooner when the blocker activates or turns Ready)."""
MAX_BEHIND = 3
"""How often in a row one Subscription goes back behind its blockers before writing."""
PARENT_GRACE = 2.0
"""Seconds a new Subscription whose parent is not in the cache waits for it before writing
`ParentSubscriptionNotFound`: children created before their parent (a burst of creates, a
directory applied in name order) would write a hold the parent's arrival overwrites at once.
The parent's create wakes it sooner (the parent index); after the grace the hold is written."""


Record = Callable[[bodies.Object, str, str, str], Awaitable[None]]
"""Records one Event about an object: (object, type, reason, message)."""


def watches_target(sub: bodies.SubscriptionBody) -> bool:
    """A live Subscription with a complete `targetRef` whose target must be re-checked."""
    ref = subscriptions.target_ref(sub)
    return (
        ref is not None
        and ref.complete
        and not family.is_deactivated(sub)
        and not refs.is_deleting(sub)
        and not subscriptions.targets_itself(sub)
    )


def soonest(*delays: float | None) -> float | None:
    """The earliest requested requeue, or None when nobody asked for one."""
    found = [d for d in delays if d is not None]
    return min(found) if found else None


class SubscriptionReconciler:
    """One Subscription per key ("Subscription", namespace, name)."""

    controller = CONTROLLER

    def __init__(
        self,
        client: lightkube.AsyncClient,
        caches: caches_.Caches,
        *,
        target_recheck_seconds: float,
        mirror: ledger_mirror.Mirror | None = None,
        fresh: written.Written | None = None,
        pending: Callable[[tuple[str, str, str]], bool] = lambda _key: False,
        recorder: events.Recorder | None = None,
    ) -> None:
        self.client = client
        self.record: Record = (
            recorder.record
            if recorder is not None
            else lambda obj, type_, reason, message: events.record(
                client, obj, type_, reason, message
            )
        )
        self.caches = caches
        self.mirror = mirror
        self.fresh = fresh if fresh is not None else written.Written()
        self.pending = pending
        self.waited: dict[tuple[str, str, str], int] = {}
        self.parent_due: dict[tuple[str, str, str], float] = {}
        self.target_recheck_seconds = target_recheck_seconds
        self.targets = targets.TargetReader(client)
        self.read_backoff = ledger_mirror.Backoff(base=0.5)
        self.mirror_backoff = ledger_mirror.Backoff()

    async def reconcile(self, key: tuple[str, str, str]) -> float | None:
        _, namespace, name = key
        sub = self.lookup(views.Key(namespace, name))
        if sub is None:
            self.read_backoff.succeeded(key)
            self.mirror_backoff.succeeded(key)
            self.waited.pop(key, None)
            self.parent_due.pop(key, None)
            return None
        try:
            sub, delay = await self._sync(key, sub)
        except lightkube.ApiError as exc:
            code = kube_client.status_code(exc)
            if code == 404:
                return None
            if code in finalizers.CONFLICT_CODES:
                return CONFLICT_RETRY
            raise
        return soonest(delay, await self._mirror(key, sub))

    def lookup(self, key: views.Key) -> bodies.SubscriptionBody | None:
        """A Subscription from the watch cache, or as we just wrote it if that is newer."""
        return self.fresh.latest(self.caches.subscription(key))

    def members(self, root: str) -> list[bodies.SubscriptionBody]:
        """The family index, each member as fresh as `lookup` has it."""
        return [self.fresh.latest(m) or m for m in self.caches.members(root)]

    def _blockers(
        self, sub: bodies.SubscriptionBody, decided: subscriptions.SubscriptionPlan
    ) -> list[tuple[str, str, str]]:
        """The Subscriptions a hold waits on: the parent that is not Ready, or the family
        members that could cover a missing requirement but are not active (yet)."""
        if decided.reason is Reason.PARENT_SUBSCRIPTION_NOT_READY:
            up = family.parent_key(sub)
            return [] if up is None else [(KIND, *up)]
        root = decided.status.get("compatibilityRoot")
        if decided.reason is not Reason.COMPATIBILITY_REQUIREMENT_NOT_MET or not root:
            return []
        candidates = family.coverage_candidates(sub, self.members(str(root)))
        return [(KIND, *refs.key_of(m)) for m in candidates if not family.is_active(m)]

    def _wait_behind(
        self,
        key: tuple[str, str, str],
        sub: bodies.SubscriptionBody,
        decided: subscriptions.SubscriptionPlan,
    ) -> bool:
        """Reconcile in dependency order: a Subscription not activated yet, held on a parent
        or relative that is itself waiting in the queue, goes back behind it (a few times in
        a row at most) instead of writing a hold the next pass would overwrite. It is put
        back rather than left to a wake-up, so it stays live whatever the blocker decides."""
        if (
            not decided.changed
            or family.is_activated(sub)
            or refs.is_deleting(sub)
            or self.waited.get(key, 0) >= MAX_BEHIND
            or not any(self.pending(k) for k in self._blockers(sub, decided))
        ):
            self.waited.pop(key, None)
            return False
        self.waited[key] = self.waited.get(key, 0) + 1
        return True

    def _await_parent(
        self,
        key: tuple[str, str, str],
        sub: bodies.SubscriptionBody,
        decided: subscriptions.SubscriptionPlan,
    ) -> float | None:
        """Seconds left for a new Subscription (no status written yet) to wait for a parent
        that is not in the cache before holding on it, or None when it writes now."""
        if (
            decided.reason is not Reason.PARENT_SUBSCRIPTION_NOT_FOUND
            or not decided.changed
            or sub.get("status")
            or refs.is_deleting(sub)
        ):
            self.parent_due.pop(key, None)
            return None
        now = time.monotonic()
        due = self.parent_due.setdefault(key, now + PARENT_GRACE)
        if now >= due:
            self.parent_due.pop(key, None)
            return None
        return due - now

    async def _sync(
        self, key: tuple[str, str, str], sub: bodies.SubscriptionBody
    ) -> tuple[bodies.SubscriptionBody, float | None]:
        if subscriptions.needs_finalizer(sub):
            added = await finalizers.add(
                self.client, resources.Subscription, sub, subscriptions.FINALIZER
            )
            if added:
                self.fresh.record(sub, added)
            sub = added or sub
        offering_key = family.offering_key(sub)
        decided = subscriptions.plan(
            sub,
            offering=self.caches.offering(offering_key) if offering_key else None,
            lookup=self.lookup,
            members=self.members,
            target=await self._target(sub),
            now=dt.datetime.now(dt.UTC),
        )
        grace = self._await_parent(key, sub, decided)
        if grace is not None:
            return sub, grace
        if self._wait_behind(key, sub, decided):
            return sub, BEHIND
        if decided.changed:
            before = sub
            sub = bodies.as_subscription(
                await status.write(self.client, resources.Subscription, sub, decided.status)
            )
            self.fresh.record(before, sub)
        for event in decided.events:
            await self.record(sub, event.type, event.reason, event.message)
        if decided.activated or decided.deactivated:
            log.info(
                "subscription activated" if decided.activated else "subscription deactivated",
                extra={"subscription": "/".join(key[1:]), "reason": str(decided.reason)},
            )
        retry: float | None = None
        if decided.retry:
            retry = self.read_backoff.failed(key)
        else:
            self.read_backoff.succeeded(key)
        recheck = self.target_recheck_seconds if watches_target(sub) else None
        return sub, soonest(retry, recheck)

    async def _target(self, sub: bodies.SubscriptionBody) -> subscriptions.TargetObserved:
        """The plain GET the target gate needs (None when the gate has nothing to fetch)."""
        if not watches_target(sub):
            return None
        ref = subscriptions.target_ref(sub)
        assert ref is not None
        try:
            found = await self.targets.exists(
                ref.api_version, ref.kind, ref.name, ref.namespace, refs.key_of(sub).namespace
            )
        except targets.TargetReadError as exc:
            return refs.ReadError(str(exc))
        return subscriptions.Target.FOUND if found else subscriptions.Target.NOT_FOUND

    async def _labels(self, namespace: str) -> dict[str, str] | None:
        """The namespace's labels from the watch cache, else a GET; None when it is gone."""
        cached = (self.caches.namespaces or {}).get(("", namespace))
        found = cached or await kube_client.get_or_none(self.client, core_v1.Namespace, namespace)
        if not found:
            return None
        return dict((found.get("metadata") or {}).get("labels") or {})

    async def _mirror(
        self, key: tuple[str, str, str], sub: bodies.SubscriptionBody
    ) -> float | None:
        mirror = self.mirror
        if mirror is None:
            return None

        async def write() -> None:
            labels = await self._labels(key[1])
            if labels is not None:  # the namespace is gone: nothing to mirror
                await mirror.subscription(sub, labels)

        failures = (ledger_mirror.MirrorError, lightkube.ApiError)
        return await ledger_mirror.mirrored(self.mirror_backoff, key, write, failures)
