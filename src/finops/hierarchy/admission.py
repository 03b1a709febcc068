"""What the two validating webhooks decide, as pure functions of the request and a cache.

- Offering CREATE: refuse a self-reference, then any cycle the depth-first walk of
  `requiredOfferings` finds (the message names it); Offerings that do not exist are skipped.
- Offering UPDATE: nothing (spec immutability is a CRD rule).
- Offering DELETE: refuse while dependents exist, naming them (DESIGN §2.4: every Subscription
  still referencing it counts, ready or not).
- Subscription CREATE: refuse itself as `parent` or as `lifecycle.targetRef`.

The webhook server turns a refusal into an AdmissionReview response carrying the message.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable
from typing import TypeVar

from finops.api import bodies, views
from finops.api.reasons import Reason
from finops.hierarchy import offerings, refs, subscriptions


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """Allowed, or refused with a reason and the message the client sees."""

    allowed: bool
    reason: str = ""
    message: str = ""


ALLOWED = Verdict(True)
B = TypeVar("B", bodies.OfferingBody, bodies.SubscriptionBody)


def offering_create(
    offering: bodies.OfferingBody,
    existing: Iterable[bodies.OfferingBody],
    namespace: str | None = None,
) -> Verdict:
    """Refuse a requirement graph that closes on itself.

    `existing` are the Offerings already stored; `namespace` is the request's, when the
    object body leaves it out.
    """
    obj = _with_namespace(offering, namespace)
    me = refs.key_of(obj)
    if me in offerings.requirements(obj):
        return Verdict(
            False, Reason.CIRCULAR_DEPENDENCY_DETECTED, offerings.cycle_message([me, me])
        )
    table = {refs.key_of(o): o for o in existing}
    table[me] = obj

    def requires(key: views.Key) -> list[views.Key] | None:
        found = table.get(key)
        return None if found is None else offerings.requirements(found)

    cycle = offerings.find_cycle(me, requires)
    if cycle is not None:
        return Verdict(False, Reason.CIRCULAR_DEPENDENCY_DETECTED, offerings.cycle_message(cycle))
    return ALLOWED


def offering_update() -> Verdict:
    """Nothing to check: the CRD's `self == oldSelf` rule already refuses spec edits."""
    return ALLOWED


def offering_delete(
    offering: bodies.OfferingBody,
    stored_subscriptions: Iterable[bodies.SubscriptionBody],
    stored_offerings: Iterable[bodies.OfferingBody],
) -> Verdict:
    """Refuse while anything references the Offering; the message names every dependent."""
    key = refs.key_of(offering)
    found = offerings.dependents(key, stored_subscriptions, stored_offerings)
    if not found:
        return ALLOWED
    reason = (
        Reason.DEPENDENT_SUBSCRIPTIONS_EXIST
        if found.subscriptions
        else Reason.DEPENDENT_OFFERINGS_EXIST
    )
    return Verdict(
        False, reason, f"offering {key} cannot be deleted: " + "; ".join(found.messages())
    )


def subscription_create(
    subscription: bodies.SubscriptionBody, namespace: str | None = None
) -> Verdict:
    """Refuse a Subscription that is its own parent or its own target."""
    obj = _with_namespace(subscription, namespace)
    me = refs.key_of(obj)
    if subscriptions.names_itself_as_parent(obj):
        return Verdict(
            False,
            Reason.CIRCULAR_DEPENDENCY_DETECTED,
            f"subscription {me} cannot name itself as its parent (spec.parent.subscriptionRef)",
        )
    if subscriptions.targets_itself(obj):
        return Verdict(
            False,
            Reason.TARGET_IS_SELF_REFERENCE,
            f"subscription {me} cannot name itself as its lifecycle.targetRef",
        )
    return ALLOWED


def _with_namespace(obj: B, namespace: str | None) -> B:
    """The object with the request's namespace filled in where the body has none."""
    meta = obj.get("metadata") or {}
    if namespace is None or meta.get("namespace"):
        return obj
    filled = copy.copy(obj)
    filled["metadata"] = {**meta, "namespace": namespace}
    return filled
