"""Offering decisions: the requirement graph, readiness with resolved pricing, the delete guard.

Readiness is one pass in a fixed order: the requirement graph (cycles first, since a cycle's
members wait on each other forever and would otherwise read as merely "not ready"), then each
direct requirement (exists, is ready), then pricing. Pricing is resolved once and kept: an
Offering that already carries `status.resolvedPricing` never re-resolves, whatever the books
do later. `Ready` and `PricingResolved` are written together with the same status, reason
(except on success, where they read `ValidationSucceeded` / `PricingResolved`) and message.

The delete guard counts every Subscription still referencing the Offering, ready or not,
deactivated or not, winding down or not (DESIGN §2.4), and every other Offering that requires it
and is not itself being deleted (a dependent already on its way out cannot be deleted "first",
and waiting on it would deadlock two Offerings deleted together).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import cast

from finops.api import bodies, conditions, views
from finops.api.reasons import ConditionType, EventReason, EventType, Reason
from finops.hierarchy import refs
from finops.pricing import resolve

FINALIZER = "offerings.finops.stakater.com/finalizer"
PUBLISHED = "requirements resolved and pricing published"


def requirements(offering: bodies.OfferingBody) -> list[views.Key]:
    """`spec.compatibility.requiredOfferings` as keys, in declared order."""
    compatibility = offering.get("spec", {}).get("compatibility") or {}
    found = (views.ref_key(r) for r in compatibility.get("requiredOfferings") or ())
    return [k for k in found if k is not None]


class UnreadableOfferingError(Exception):
    """The graph walk met an Offering it could not read (a transient failure)."""

    def __init__(self, key: views.Key, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"reading offering {key}: {message}")


def find_cycle(
    start: views.Key, requires: Callable[[views.Key], Sequence[views.Key] | None]
) -> list[views.Key] | None:
    """Depth-first from `start`: the path up to the first requirement that re-enters it.

    `requires(key)` gives an Offering's requirements, or None when it does not exist; missing
    Offerings are skipped, since a missing object cannot close a loop. The path runs from
    `start` and ends with the node that was already on it (`[a, b, a]`, or `[a, b, c, b]`
    when the loop is further down). Iterative, so a deep graph cannot exhaust the stack.
    """
    first = requires(start)
    if first is None:
        return None
    path = [start]
    on_path = {start}
    finished: set[views.Key] = set()
    pending: list[Iterator[views.Key]] = [iter(first)]
    while pending:
        nxt = next(pending[-1], None)
        if nxt is None:
            pending.pop()
            done = path.pop()
            on_path.discard(done)
            finished.add(done)
            continue
        if nxt in on_path:
            return [*path, nxt]
        if nxt in finished:
            continue
        edges = requires(nxt)
        if edges is None:
            finished.add(nxt)
            continue
        path.append(nxt)
        on_path.add(nxt)
        pending.append(iter(edges))
    return None


def cycle_message(path: Sequence[views.Key]) -> str:
    """How a cycle is reported, on the condition and at admission alike."""
    return "circular dependency detected: " + " -> ".join(str(k) for k in path)


def _walker(
    offering: bodies.OfferingBody, lookup: refs.Lookup[bodies.OfferingBody]
) -> Callable[[views.Key], Sequence[views.Key] | None]:
    me = refs.key_of(offering)

    def requires(key: views.Key) -> Sequence[views.Key] | None:
        if key == me:
            return requirements(offering)
        found = lookup(key)
        if isinstance(found, refs.ReadError):
            raise UnreadableOfferingError(key, found.message)
        return None if found is None else requirements(found)

    return requires


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """One readiness finding: the reason (ValidationSucceeded when it passed) and message."""

    reason: Reason
    message: str

    @property
    def ok(self) -> bool:
        return self.reason is Reason.VALIDATION_SUCCEEDED


def requirement_check(
    offering: bodies.OfferingBody, lookup: refs.Lookup[bodies.OfferingBody]
) -> Check:
    """The requirement graph and each direct requirement, first problem wins."""
    me = refs.key_of(offering)
    try:
        cycle = find_cycle(me, _walker(offering, lookup))
    except UnreadableOfferingError as exc:
        return Check(Reason.VALIDATION_ERROR, str(exc))
    if cycle is not None:
        return Check(Reason.CIRCULAR_DEPENDENCY_DETECTED, cycle_message(cycle))
    for key in requirements(offering):
        found = lookup(key)
        if isinstance(found, refs.ReadError):
            return Check(Reason.VALIDATION_ERROR, f"reading offering {key}: {found.message}")
        if found is None:
            return Check(Reason.REQUIRED_OFFERING_NOT_FOUND, f"required offering {key} not found")
        if not refs.is_ready(found):
            return Check(
                Reason.REQUIRED_OFFERING_NOT_READY, f"required offering {key} is not ready"
            )
    return Check(Reason.VALIDATION_SUCCEEDED, "requirements resolved")


def is_resolved(offering: bodies.OfferingBody) -> bool:
    """Pricing was published once (and is therefore kept)."""
    pricing = offering.get("status", {}).get("resolvedPricing")
    return isinstance(pricing, Mapping) and bool(pricing.get("resolvedAt"))


@dataclasses.dataclass(frozen=True, slots=True)
class Readiness:
    """Whether the Offering is ready, why, and the `resolvedPricing` it should carry."""

    check: Check
    resolved_pricing: bodies.ResolvedPricingBody | None

    @property
    def ready(self) -> bool:
        return self.check.ok


def readiness(
    offering: bodies.OfferingBody,
    *,
    lookup: refs.Lookup[bodies.OfferingBody],
    books: Iterable[bodies.PriceBookBody],
    now: dt.datetime,
) -> Readiness:
    """Requirements, then pricing (resolved now unless it already was)."""
    current = offering.get("status", {}).get("resolvedPricing")
    kept = current if is_resolved(offering) else None
    check = requirement_check(offering, lookup)
    if not check.ok:
        return Readiness(check, kept)
    if kept is not None:
        return Readiness(Check(Reason.VALIDATION_SUCCEEDED, PUBLISHED), kept)
    try:
        resolution = resolve.resolve(offering, books, now)
    except ValueError as exc:
        return Readiness(Check(Reason.VALIDATION_ERROR, str(exc)), None)
    if resolution.pricing is None:
        return Readiness(Check(Reason(resolution.outcome.value), resolution.message), None)
    return Readiness(Check(Reason.VALIDATION_SUCCEEDED, PUBLISHED), resolution.pricing)


def readiness_conditions(
    check: Check,
) -> tuple[conditions.DecidedCondition, conditions.DecidedCondition]:
    """`Ready` and `PricingResolved`: same status, same message, same reason but on success."""
    status = "True" if check.ok else "False"
    return (
        conditions.DecidedCondition(ConditionType.READY, status, check.reason, check.message),
        conditions.DecidedCondition(
            ConditionType.PRICING_RESOLVED,
            status,
            Reason.PRICING_RESOLVED if check.ok else check.reason,
            check.message,
        ),
    )


# ---------------------------------------------------------------- deletion


@dataclasses.dataclass(frozen=True, slots=True)
class Dependents:
    """Who still points at an Offering."""

    subscriptions: tuple[views.Key, ...]
    offerings: tuple[views.Key, ...]

    def __bool__(self) -> bool:
        return bool(self.subscriptions or self.offerings)

    def messages(self) -> list[str]:
        """The documented phrases, each followed by the dependents it names."""
        found = []
        if self.subscriptions:
            found.append(f"still referenced by subscriptions: {refs.joined(self.subscriptions)}")
        if self.offerings:
            found.append(f"still required by dependent resources: {refs.joined(self.offerings)}")
        return found


def dependents(
    key: views.Key,
    subscriptions: Iterable[bodies.SubscriptionBody],
    offerings: Iterable[bodies.OfferingBody],
) -> Dependents:
    """Every Subscription whose `offeringRef` names `key` (any state), and every other Offering
    requiring it that is not itself being deleted; each sorted by key."""
    subs = sorted(
        refs.key_of(s)
        for s in subscriptions
        if views.ref_key(s.get("spec", {}).get("offeringRef")) == key
    )
    offs = sorted(
        refs.key_of(o)
        for o in offerings
        if refs.key_of(o) != key and not refs.is_deleting(o) and key in requirements(o)
    )
    return Dependents(tuple(subs), tuple(offs))


@dataclasses.dataclass(frozen=True, slots=True)
class Guard:
    """The `Deleting` condition and whether the finalizer may go."""

    condition: conditions.DecidedCondition
    release_finalizer: bool


def deletion_guard(
    offering: bodies.OfferingBody,
    subscriptions: Iterable[bodies.SubscriptionBody] | refs.ReadError,
    offerings: Iterable[bodies.OfferingBody] | refs.ReadError,
) -> Guard:
    """`Deleting=False` while anything references the Offering, `True` (and release) when not."""
    for listed, what in ((subscriptions, "subscriptions"), (offerings, "offerings")):
        if isinstance(listed, refs.ReadError):
            return Guard(
                conditions.DecidedCondition(
                    ConditionType.DELETING,
                    "False",
                    Reason.VALIDATION_ERROR,
                    f"listing dependent {what}: {listed.message}",
                ),
                False,
            )
    assert not isinstance(subscriptions, refs.ReadError)
    assert not isinstance(offerings, refs.ReadError)
    found = dependents(refs.key_of(offering), subscriptions, offerings)
    if not found:
        return Guard(
            conditions.DecidedCondition(
                ConditionType.DELETING,
                "True",
                Reason.DELETION_ALLOWED,
                "no Subscription or Offering references this Offering",
            ),
            True,
        )
    reason = (
        Reason.DEPENDENT_SUBSCRIPTIONS_EXIST
        if found.subscriptions
        else Reason.DEPENDENT_OFFERINGS_EXIST
    )
    return Guard(
        conditions.DecidedCondition(
            ConditionType.DELETING, "False", reason, "; ".join(found.messages())
        ),
        False,
    )


# ---------------------------------------------------------------- one pass


@dataclasses.dataclass(frozen=True, slots=True)
class OfferingPlan:
    """What one reconcile of an Offering writes."""

    status: bodies.OfferingStatusBody
    changed: bool
    readiness: Readiness
    release_finalizer: bool
    events: tuple[refs.Event, ...]


def plan(
    offering: bodies.OfferingBody,
    *,
    lookup: refs.Lookup[bodies.OfferingBody],
    books: Iterable[bodies.PriceBookBody],
    now: dt.datetime,
    subscriptions: Iterable[bodies.SubscriptionBody] | refs.ReadError = (),
    offerings: Iterable[bodies.OfferingBody] | refs.ReadError = (),
) -> OfferingPlan:
    """The desired status of one Offering.

    `lookup` reads other Offerings by key (requirements and the graph walk); `subscriptions`
    and `offerings` are only consulted for an Offering being deleted, to find dependents.
    """
    current = offering.get("status", {})
    generation = refs.generation_of(offering)
    found = readiness(offering, lookup=lookup, books=books, now=now)
    conds: list[bodies.ConditionBody] = list(current.get("conditions") or ())
    for cond in readiness_conditions(found.check):
        conds = conditions.set_condition(conds, cond, generation=generation, now=now)
    status = cast(bodies.OfferingStatusBody, dict(current))
    status["ready"] = "True" if found.ready else "False"
    if found.resolved_pricing is not None:
        status["resolvedPricing"] = found.resolved_pricing
    else:
        status.pop("resolvedPricing", None)
    release = False
    events: list[refs.Event] = []
    if refs.is_deleting(offering):
        guard = deletion_guard(offering, subscriptions, offerings)
        release = guard.release_finalizer
        before = conditions.find(conds, ConditionType.DELETING)
        blocked = guard.condition.status == "False"
        if blocked and (
            before is None
            or (before.get("reason"), before.get("message"))
            != (guard.condition.reason, guard.condition.message)
        ):
            events.append(
                refs.Event(EventType.WARNING, EventReason.DELETION_BLOCKED, guard.condition.message)
            )
        conds = conditions.set_condition(conds, guard.condition, generation=generation, now=now)
    status["conditions"] = conds
    return OfferingPlan(status, status != dict(current), found, release, tuple(events))


def needs_finalizer(offering: bodies.OfferingBody) -> bool:
    """Added the first time the reconciler sees a live Offering."""
    finalizers = (offering.get("metadata") or {}).get("finalizers") or ()
    return not refs.is_deleting(offering) and FINALIZER not in finalizers


def readiness_flipped(old: bodies.OfferingBody | None, new: bodies.OfferingBody | None) -> bool:
    """Whether Subscriptions bound to this Offering, and Offerings requiring it, should be
    re-queued: it appeared, disappeared, or its `status.ready` changed."""
    if old is None or new is None:
        return old is not new
    return refs.is_ready(old) != refs.is_ready(new)


def awaits_pricebook(offering: bodies.OfferingBody) -> bool:
    """Not yet resolved, so a change among the PriceBooks may let it resolve (re-queue it)."""
    return not is_resolved(offering)
