"""Families of Subscriptions: the root, the subtree, and who can cover a requirement.

A family is the tree of Subscriptions sharing one root ancestor; each member records the root's
`metadata.uid` in `status.compatibilityRoot`, which is what the controller indexes on to fetch a
family in one lookup. A requirement of a member's Offering is covered when another member that
is active (an `activatedAt`, no `deactivatedAt`; readiness is not consulted) binds exactly the
required Offering, searching the whole family except the member itself and everything beneath
it. A root's subtree is the whole family, so a root has no candidates at all.

The subtree is found top-down, from each member's `spec.parent`: if a middle member has already
left the cluster, the members below it can no longer be placed under anyone, and count as
candidates for everyone but themselves and their own descendants.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterable, Sequence

from finops.api import bodies, views
from finops.hierarchy import refs

Members = Callable[[str], Iterable[bodies.SubscriptionBody]]
"""The Subscriptions whose `status.compatibilityRoot` is the given uid (the family index)."""


def parent_key(sub: bodies.SubscriptionBody) -> views.Key | None:
    return views.SubscriptionView.parse(sub).parent


def offering_key(sub: bodies.SubscriptionBody) -> views.Key | None:
    return views.SubscriptionView.parse(sub).offering


def root_of(sub: bodies.SubscriptionBody) -> str | None:
    return views.SubscriptionView.parse(sub).compatibility_root


def is_activated(sub: bodies.SubscriptionBody) -> bool:
    return views.SubscriptionView.parse(sub).activated


def is_deactivated(sub: bodies.SubscriptionBody) -> bool:
    return views.SubscriptionView.parse(sub).deactivated


def is_active(sub: bodies.SubscriptionBody) -> bool:
    """Billing is open: activated and not deactivated."""
    return views.SubscriptionView.parse(sub).active


@dataclasses.dataclass(frozen=True, slots=True)
class Root:
    """The root uid, or why it cannot be resolved yet."""

    uid: str | None
    problem: str = ""


def resolve_root(
    sub: bodies.SubscriptionBody, lookup: refs.Lookup[bodies.SubscriptionBody]
) -> Root:
    """Walk up `spec.parent` to the Subscription with no parent (stopping early at an ancestor
    that already carries a stamped root). Refuses to loop on a parent cycle."""
    stamped = root_of(sub)
    if stamped:
        return Root(stamped)
    seen = {refs.key_of(sub)}
    current: bodies.SubscriptionBody = sub
    while True:
        up = parent_key(current)
        if up is None:
            uid = refs.uid_of(current)
            return Root(uid) if uid else Root(None, f"root {refs.key_of(current)} has no uid")
        if up in seen:
            return Root(None, f"parent chain loops at subscription {up}")
        seen.add(up)
        found = lookup(up)
        if isinstance(found, refs.ReadError):
            return Root(None, f"reading ancestor subscription {up}: {found.message}")
        if found is None:
            return Root(None, f"ancestor subscription {up} not found")
        stamped = root_of(found)
        if stamped:
            return Root(stamped)
        current = found


def subtree(
    sub: bodies.SubscriptionBody, members: Iterable[bodies.SubscriptionBody]
) -> set[views.Key]:
    """The Subscription's own key and those of all its descendants among `members`."""
    children: dict[views.Key, list[views.Key]] = collections.defaultdict(list)
    for member in members:
        up = parent_key(member)
        if up is not None:
            children[up].append(refs.key_of(member))
    found = {refs.key_of(sub)}
    queue = collections.deque(found)
    while queue:
        for child in children.get(queue.popleft(), ()):
            if child not in found:
                found.add(child)
                queue.append(child)
    return found


def coverage_candidates(
    sub: bodies.SubscriptionBody, members: Iterable[bodies.SubscriptionBody]
) -> list[bodies.SubscriptionBody]:
    """Family members that may cover this Subscription's requirements (active or not)."""
    if parent_key(sub) is None:
        return []
    family = list(members)
    excluded = subtree(sub, family)
    return [m for m in family if refs.key_of(m) not in excluded]


def uncovered(
    sub: bodies.SubscriptionBody,
    required: Sequence[views.Key],
    members: Iterable[bodies.SubscriptionBody],
) -> views.Key | None:
    """The first required Offering no active candidate binds, or None when all are covered."""
    if not required:
        return None
    candidates = (views.SubscriptionView.parse(m) for m in coverage_candidates(sub, members))
    bound = {c.offering for c in candidates if c.active}
    return next((req for req in required if req not in bound), None)


def coverage_message(required: views.Key) -> str:
    return f"required offering {required} not covered by an active subscription in the family"


Children = Callable[[views.Key], Iterable[bodies.SubscriptionBody]]
"""The Subscriptions whose `spec.parent` names the given key (the parent index)."""
