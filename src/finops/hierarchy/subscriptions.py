"""Subscription decisions: the four gates, activation, terminal deactivation, the delete path.

One pass, in order (the first failure wins and is the only reason shown):

0. a deactivated Subscription is never re-validated; deletion only relabels its cause;
1. a Subscription being deleted is deactivated (`MarkedForDeletion`) and waits for the charge
   job (`Deleting=False WaitingForCollectionJob`);
2. self-references in the spec (`CircularDependencyDetected`, `TargetIsSelfReference`);
3. the Offering gate, 4. the parent gate (then `status.compatibilityRoot` is stamped once),
5. the compatibility gate, 6. the target gate;
7. activation (`activatedAt` written once), or `Orphaned` for an active Subscription that
   outlived its parent under an `Orphan` policy.

A failing gate holds a Subscription at `Ready=False` and leaves an active one billing. Three
gates can also end an active one, terminally: a parent that is gone or deactivated (under the
effective `Deactivate` policy), coverage that went away, a target that is genuinely missing.
Deactivation writes `deactivatedAt`, `Active=False` with the cause and `Ready=False` with
`ValidationSucceeded`. Failed reads (`ValidationError`) hold and ask for a retry; they never end
a Subscription.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
from collections.abc import Iterable, Mapping
from typing import Any, cast

from finops.api import bodies, conditions, models, views
from finops.api.reasons import ConditionType, EventReason, EventType, Reason
from finops.hierarchy import family, offerings, refs

FINALIZER = "subscriptions.finops.stakater.com/finalizer"
DEACTIVATE = "Deactivate"
ORPHAN = "Orphan"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


# ---------------------------------------------------------------- target


@dataclasses.dataclass(frozen=True, slots=True)
class TargetRef:
    """`spec.lifecycle.targetRef`: what the target gate fetches with a plain GET."""

    api_version: str
    kind: str
    name: str
    namespace: str

    @property
    def complete(self) -> bool:
        """A GET needs an apiVersion, a kind and a name (no namespace: cluster-scoped)."""
        return bool(self.api_version and self.kind and self.name)

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.api_version} {self.kind} {where}"


def target_ref(sub: bodies.SubscriptionBody) -> TargetRef | None:
    lifecycle = sub.get("spec", {}).get("lifecycle") or {}
    ref = lifecycle.get("targetRef") if isinstance(lifecycle, Mapping) else None
    if not isinstance(ref, Mapping):
        return None
    return TargetRef(
        api_version=str(ref.get("apiVersion") or ""),
        kind=str(ref.get("kind") or ""),
        name=str(ref.get("name") or ""),
        namespace=str(ref.get("namespace") or ""),
    )


def targets_itself(sub: bodies.SubscriptionBody, namespace: str | None = None) -> bool:
    """The targetRef names this very Subscription: name, namespace, kind and API version."""
    ref = target_ref(sub)
    if ref is None:
        return False
    me = refs.key_of(sub)
    return (
        ref.kind == models.Subscription.kind_name
        and ref.api_version == models.API_VERSION
        and ref.name == me.name
        and ref.namespace == (me.namespace if namespace is None else namespace)
    )


def names_itself_as_parent(sub: bodies.SubscriptionBody, namespace: str | None = None) -> bool:
    me = refs.key_of(sub)
    if namespace is not None:
        me = views.Key(namespace, me.name)
    return family.parent_key(sub) == me


class Target(enum.StrEnum):
    """What the plain GET of the target found."""

    FOUND = "Found"
    NOT_FOUND = "NotFound"


TargetObserved = Target | refs.ReadError | None
"""The GET's result; None when it was not made (no targetRef)."""


# ---------------------------------------------------------------- onParentDeactivate


def _owns_policy(fields: object) -> bool:
    node = fields
    for step in ("f:spec", "f:lifecycle", "f:onParentDeactivate"):
        if not isinstance(node, Mapping) or step not in node:
            return False
        node = node[step]
    return True


def _applied_policy(last: str) -> bool | None:
    """What `kubectl apply`'s annotation says: sent or not, None when it cannot tell."""
    try:
        applied = json.loads(last)
    except ValueError:
        applied = None
    if isinstance(applied, Mapping):
        lifecycle = (applied.get("spec") or {}).get("lifecycle") or {}
        return isinstance(lifecycle, Mapping) and "onParentDeactivate" in lifecycle
    return None


def _field_managers(meta: bodies.ObjectMetaBody) -> list[Mapping[str, Any]]:
    """The managedFields entries of the object itself (not of a subresource)."""
    return [
        e
        for e in meta.get("managedFields") or ()
        if isinstance(e, Mapping) and not e.get("subresource")
    ]


def _client_sent_policy(sub: bodies.SubscriptionBody) -> bool | None:
    """Whether a client wrote `lifecycle.onParentDeactivate`, as far as the object tells.

    The CRD defaults the field whenever `lifecycle` is present, so the stored value alone
    cannot say. `kubectl apply`'s last-applied annotation holds exactly what was applied;
    server-side apply owns only what was sent. A plain create or update owns defaulted fields
    too, so it cannot tell (None).
    """
    meta = sub.get("metadata") or {}
    last = (meta.get("annotations") or {}).get(LAST_APPLIED)
    if last:
        said = _applied_policy(last)
        if said is not None:
            return said
    entries = _field_managers(meta)
    if any(e.get("operation") == "Apply" and _owns_policy(e.get("fieldsV1")) for e in entries):
        return True
    if any(_owns_policy(e.get("fieldsV1")) for e in entries):
        return None
    return False if entries else None


_APPLIED = {True: '{"spec":{"lifecycle":{"onParentDeactivate":""}}}', False: "{}", None: "null"}
_OWNS: dict[str, Any] = {"f:spec": {"f:lifecycle": {"f:onParentDeactivate": {}}}}
_MANAGERS = {  # (an Apply owns it, anyone owns it) -> one entry that reads the same
    (True, True): ({"operation": "Apply", "fieldsV1": _OWNS},),
    (False, True): ({"operation": "Update", "fieldsV1": _OWNS},),
    (False, False): ({"operation": "Update", "fieldsV1": {}},),
}


def policy_evidence(meta: bodies.ObjectMetaBody) -> dict[str, Any]:
    """The last-applied annotation and managedFields cut down to what `_client_sent_policy`
    reads, so a watch cache need not hold the whole manifest and every manager's field set.

    Returns `{"annotations": {LAST_APPLIED: ...}}` (when the object has it) and
    `{"managedFields": (one entry,)}` (when it has managers of its own); the policy read from
    metadata carrying only these equals the one read from the whole object. The entries are
    shared between objects: caches are read, never modified.
    """
    found: dict[str, Any] = {}
    annotations = meta.get("annotations") or {}
    if LAST_APPLIED in annotations:
        last = annotations[LAST_APPLIED]
        try:
            kept = _APPLIED[_applied_policy(last)] if last else last
        except (AttributeError, TypeError):
            kept = last  # an odd manifest: keep it whole, read it the same way later
        found["annotations"] = {LAST_APPLIED: kept}
    entries = _field_managers(meta)
    if entries:
        owned = [_owns_policy(e.get("fieldsV1")) for e in entries]
        applied = any(
            o and e.get("operation") == "Apply" for o, e in zip(owned, entries, strict=True)
        )
        found["managedFields"] = _MANAGERS[(applied, any(owned))]
    return found


def explicit_on_parent_deactivate(sub: bodies.SubscriptionBody) -> str | None:
    """The Subscription's own policy when it set one on purpose, else None (DESIGN §2.5).

    A `lifecycle` block holding only `targetRef` sets nothing. `Orphan` is never a default, so
    it is always explicit; a stored `Deactivate` counts only when the object shows a client
    sent it.
    """
    lifecycle = sub.get("spec", {}).get("lifecycle")
    if not isinstance(lifecycle, Mapping) or not lifecycle.get("onParentDeactivate"):
        return None
    value = str(lifecycle["onParentDeactivate"])
    sent = _client_sent_policy(sub)
    if sent is None:
        return value if value != DEACTIVATE else None
    return value if sent else None


def effective_on_parent_deactivate(
    sub: bodies.SubscriptionBody, offering: bodies.OfferingBody | None
) -> str:
    """The Subscription's explicit value, else the Offering's, else `Deactivate`; an Offering
    with `allowOverride: false` always decides."""
    lifecycle = (offering or {}).get("spec", {}).get("lifecycle") or {}
    offered = str(lifecycle.get("onParentDeactivate") or DEACTIVATE)
    if lifecycle.get("allowOverride") is False:
        return offered
    return explicit_on_parent_deactivate(sub) or offered


# ---------------------------------------------------------------- the gates


@dataclasses.dataclass(frozen=True, slots=True)
class _Hold:
    reason: Reason
    message: str
    retry: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class _End:
    reason: Reason
    message: str


@dataclasses.dataclass(frozen=True, slots=True)
class _Pass:
    orphaned: str = ""
    """Why the parent is gone, when an active Subscription outlived it as an orphan."""


def _error(what: str, key: object, failure: refs.ReadError) -> _Hold:
    return _Hold(Reason.VALIDATION_ERROR, f"reading {what} {key}: {failure.message}", True)


_Verdict = _Hold | _End | _Pass


def _gates(
    sub: bodies.SubscriptionBody,
    *,
    offering: refs.Observed[bodies.OfferingBody],
    lookup: refs.Lookup[bodies.SubscriptionBody],
    members: family.Members,
    target: TargetObserved,
) -> tuple[_Verdict, str | None]:
    """The verdict of the gates, in order, and the root to stamp (None when not resolved)."""
    view = views.SubscriptionView.parse(sub)
    active = view.active
    root = view.compatibility_root
    found = _self_reference(sub) or _offering_gate(sub, offering)
    if not isinstance(found, Mapping):
        return found, root
    parent = _parent_gate(sub, found, lookup, active)
    if not isinstance(parent, str):
        return parent, root
    if root is None:  # stamp the family root once, between the parent gate and coverage
        resolved = family.resolve_root(sub, lookup)
        if resolved.uid is None:
            message = f"cannot resolve status.compatibilityRoot: {resolved.problem}"
            return _Hold(Reason.VALIDATION_ERROR, message, True), None
        root = resolved.uid
    held = _coverage_gate(sub, found, members(root), active) or _target_gate(sub, target, active)
    return (held or _Pass(parent)), root


def _self_reference(sub: bodies.SubscriptionBody) -> _Hold | None:
    me = refs.key_of(sub)
    if names_itself_as_parent(sub):
        return _Hold(
            Reason.CIRCULAR_DEPENDENCY_DETECTED,
            f"spec.parent.subscriptionRef names this subscription ({me})",
        )
    if targets_itself(sub):
        return _Hold(
            Reason.TARGET_IS_SELF_REFERENCE, f"lifecycle.targetRef names this subscription ({me})"
        )
    return None


def _offering_gate(
    sub: bodies.SubscriptionBody, offering: refs.Observed[bodies.OfferingBody]
) -> _Hold | bodies.OfferingBody:
    """The Offering when it exists and is ready, else why the Subscription holds."""
    offering_key = family.offering_key(sub)
    if isinstance(offering, refs.ReadError):
        return _error("offering", offering_key, offering)
    if offering is None:
        return _Hold(Reason.OFFERING_NOT_FOUND, f"offering {offering_key} not found")
    if not refs.is_ready(offering):
        return _Hold(Reason.OFFERING_NOT_READY, f"offering {offering_key} is not ready")
    return offering


def _parent_gate(
    sub: bodies.SubscriptionBody,
    offering: bodies.OfferingBody,
    lookup: refs.Lookup[bodies.SubscriptionBody],
    active: bool,
) -> _Hold | _End | str:
    """The parent gate: a hold or an end, or why an active orphan outlived its parent
    ('' when it has a ready parent or none)."""
    parent_key = family.parent_key(sub)
    if parent_key is None:
        return ""
    parent = lookup(parent_key)
    if isinstance(parent, refs.ReadError):
        return _error("parent subscription", parent_key, parent)
    gone = ""
    if parent is None:
        gone = f"parent subscription {parent_key} no longer exists"
    elif family.is_deactivated(parent):
        gone = f"parent subscription {parent_key} was deactivated"
    if gone and not active:
        if parent is None:
            return _Hold(
                Reason.PARENT_SUBSCRIPTION_NOT_FOUND, f"parent subscription {parent_key} not found"
            )
        return _Hold(
            Reason.PARENT_SUBSCRIPTION_DEACTIVATED,
            f"parent subscription {parent_key} is deactivated",
        )
    if gone:
        if effective_on_parent_deactivate(sub, offering) != ORPHAN:
            return _End(Reason.PARENT_DEACTIVATED, gone)
        return gone
    if parent is not None and not refs.is_ready(parent):
        return _Hold(
            Reason.PARENT_SUBSCRIPTION_NOT_READY, f"parent subscription {parent_key} is not ready"
        )
    return ""


def _coverage_gate(
    sub: bodies.SubscriptionBody,
    offering: bodies.OfferingBody,
    family_members: Iterable[bodies.SubscriptionBody],
    active: bool,
) -> _Hold | _End | None:
    """The compatibility gate: an active Subscription that lost coverage ends."""
    missing = family.uncovered(sub, offerings.requirements(offering), family_members)
    if missing is None:
        return None
    message = family.coverage_message(missing)
    if active:
        return _End(Reason.COMPATIBILITY_REQUIREMENT_NOT_MET, message)
    return _Hold(Reason.COMPATIBILITY_REQUIREMENT_NOT_MET, message)


def _target_gate(
    sub: bodies.SubscriptionBody, target: TargetObserved, active: bool
) -> _Hold | _End | None:
    """The target gate: a deleted target ends an active Subscription."""
    ref = target_ref(sub)
    if ref is None:
        return None
    if not ref.complete:
        return _Hold(
            Reason.TARGET_NOT_FOUND, f"lifecycle.targetRef ({ref}) needs apiVersion, kind and name"
        )
    if isinstance(target, refs.ReadError):
        return _error("target", ref, target)
    if target is None:
        return _Hold(Reason.VALIDATION_ERROR, f"target {ref} was not read", True)
    if target is Target.NOT_FOUND:
        if active:
            return _End(Reason.TARGET_NOT_FOUND, f"target {ref} was deleted")
        return _Hold(Reason.TARGET_NOT_FOUND, f"target {ref} not found")
    return None


# ---------------------------------------------------------------- one pass


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriptionPlan:
    """What one reconcile of a Subscription writes, and what happened."""

    status: bodies.SubscriptionStatusBody
    changed: bool
    reason: Reason | None
    """The decisive reason: the holding gate's, the activation's, or the deactivation cause
    (None for a deactivated Subscription that is left alone)."""
    message: str
    activated: bool
    """`activatedAt` was written in this pass."""
    deactivated: bool
    """`deactivatedAt` was written in this pass."""
    retry: bool
    """A read failed: requeue with backoff."""
    events: tuple[refs.Event, ...]


class _Writer:
    """Accumulates one pass's status changes on a copy of the current status."""

    def __init__(self, sub: bodies.SubscriptionBody, now: dt.datetime) -> None:
        self.current = sub.get("status", {})
        self.status = cast(bodies.SubscriptionStatusBody, dict(self.current))
        self.conds: list[bodies.ConditionBody] = list(self.current.get("conditions") or ())
        self.generation = refs.generation_of(sub)
        self.now = now
        self.events: list[refs.Event] = []

    def condition(self, type_: ConditionType, status: str, reason: Reason, message: str) -> None:
        self.conds = conditions.set_condition(
            self.conds,
            conditions.DecidedCondition(type_, status, reason, message),
            generation=self.generation,
            now=self.now,
        )

    def condition_reason(self, type_: ConditionType) -> str | None:
        found = conditions.find(self.conds, type_)
        return None if found is None else str(found.get("reason"))

    def deactivate(self, reason: Reason, message: str) -> None:
        self.status["deactivatedAt"] = refs.timestamp(self.now)
        self.status["ready"] = "False"
        self.condition(
            ConditionType.READY,
            "False",
            Reason.VALIDATION_SUCCEEDED,
            "deactivated; the Active condition names the cause",
        )
        self.condition(ConditionType.ACTIVE, "False", reason, message)
        kind = EventType.NORMAL if reason is Reason.MARKED_FOR_DELETION else EventType.WARNING
        self.events.append(refs.Event(kind, EventReason.DEACTIVATED, f"{reason}: {message}"))

    def waiting_for_collection(self) -> None:
        self.condition(
            ConditionType.DELETING,
            "False",
            Reason.WAITING_FOR_COLLECTION_JOB,
            "waiting for a SubscriptionChargeCollection run to release the finalizer",
        )

    def plan(
        self,
        reason: Reason | None,
        message: str,
        *,
        activated: bool = False,
        deactivated: bool = False,
        retry: bool = False,
    ) -> SubscriptionPlan:
        self.status["conditions"] = self.conds
        return SubscriptionPlan(
            status=self.status,
            changed=self.status != dict(self.current),
            reason=reason,
            message=message,
            activated=activated,
            deactivated=deactivated,
            retry=retry,
            events=tuple(self.events),
        )


def plan(
    sub: bodies.SubscriptionBody,
    *,
    offering: refs.Observed[bodies.OfferingBody],
    lookup: refs.Lookup[bodies.SubscriptionBody],
    members: family.Members,
    target: TargetObserved = None,
    now: dt.datetime,
) -> SubscriptionPlan:
    """The desired status of one Subscription.

    `offering` is the Offering `spec.offeringRef` names, as read; `lookup` reads other
    Subscriptions (the parent, and ancestors while resolving the root); `members` is the family
    index; `target` is the result of the plain GET of `lifecycle.targetRef`, when it has one.
    """
    out = _Writer(sub, now)
    view = views.SubscriptionView.parse(sub)
    deleting = view.deleting

    if view.deactivated:
        return _plan_deactivated(out, deleting)

    if deleting:
        message = "subscription is being deleted"
        out.deactivate(Reason.MARKED_FOR_DELETION, message)
        out.waiting_for_collection()
        return out.plan(Reason.MARKED_FOR_DELETION, message, deactivated=True)

    verdict, root = _gates(sub, offering=offering, lookup=lookup, members=members, target=target)
    if root is not None and view.compatibility_root is None:
        out.status["compatibilityRoot"] = root

    if isinstance(verdict, _Hold):
        out.status["ready"] = "False"
        out.condition(ConditionType.READY, "False", verdict.reason, verdict.message)
        return out.plan(verdict.reason, verdict.message, retry=verdict.retry)

    if isinstance(verdict, _End):
        out.deactivate(verdict.reason, verdict.message)
        return out.plan(verdict.reason, verdict.message, deactivated=True)

    return _plan_passed(out, view, verdict, now)


def _plan_deactivated(out: _Writer, deleting: bool) -> SubscriptionPlan:
    """A deactivated Subscription is never re-validated; deleted, it waits for the charge job."""
    if not deleting:
        return out.plan(None, "deactivated; never re-validated")
    if out.condition_reason(ConditionType.ACTIVE) != Reason.MARKED_FOR_DELETION:
        earlier = out.condition_reason(ConditionType.ACTIVE)
        note = f" (deactivated earlier: {earlier})" if earlier else ""
        out.condition(
            ConditionType.ACTIVE,
            "False",
            Reason.MARKED_FOR_DELETION,
            f"subscription is being deleted{note}",
        )
    out.waiting_for_collection()
    return out.plan(Reason.MARKED_FOR_DELETION, "subscription is being deleted")


def _plan_passed(
    out: _Writer, view: views.SubscriptionView, verdict: _Pass, now: dt.datetime
) -> SubscriptionPlan:
    """Every gate passed: activate once (or stay active, possibly as an orphan)."""
    activated = not view.activated
    if activated:
        out.status["activatedAt"] = refs.timestamp(now)
        out.events.append(
            refs.Event(EventType.NORMAL, EventReason.ACTIVATED, "all activation gates passed")
        )
    if verdict.orphaned:
        reason, message = Reason.ORPHANED, f"{verdict.orphaned}; kept active as an orphan"
        if out.condition_reason(ConditionType.ACTIVE) != Reason.ORPHANED:
            out.events.append(refs.Event(EventType.NORMAL, EventReason.ORPHANED, message))
    else:
        reason, message = Reason.ACTIVATION_SUCCEEDED, "all activation gates passed"
    out.status["ready"] = "True"
    out.condition(ConditionType.READY, "True", reason, message)
    out.condition(ConditionType.ACTIVE, "True", reason, message)
    return out.plan(reason, message, activated=activated)


def needs_finalizer(sub: bodies.SubscriptionBody) -> bool:
    """Added the first time the reconciler sees a live Subscription; only the charge job
    removes it."""
    view = views.SubscriptionView.parse(sub)
    return not view.deleting and FINALIZER not in view.finalizers


# ---------------------------------------------------------------- fan-out


@dataclasses.dataclass(frozen=True, slots=True)
class Fanout:
    """Whom a change re-queues: every member of the family `root` (when stamped) and every
    Subscription whose `spec.parent` names `parent` (children not stamped yet).

    `activation`: the change is a member turning active. That only adds coverage, so of the
    family it reaches the members that have never activated (the ones a coverage hold may
    be waiting on it); an active member's gates cannot newly fail from it, and a deactivated
    one is never re-validated. Children are reached either way."""

    root: str | None
    parent: views.Key
    activation: bool = False


def fanout(
    old: bodies.SubscriptionBody | None, new: bodies.SubscriptionBody | None
) -> Fanout | None:
    """The re-queue a watch event calls for: a create, a delete (the deletion timestamp
    appearing, or the object going away), or a flip of the activation state. Anything else,
    such as refreshed cost buckets or a rewritten condition, re-queues nobody."""
    if old is None and new is None:
        return None
    either = new if new is not None else old
    assert either is not None
    root = (family.root_of(new) if new is not None else None) or (
        family.root_of(old) if old is not None else None
    )
    result = Fanout(root, refs.key_of(either))
    if old is None or new is None:
        return result
    if refs.is_deleting(old) != refs.is_deleting(new):
        return result
    if family.is_active(old) != family.is_active(new):
        return dataclasses.replace(result, activation=family.is_active(new))
    return None


def requeue(change: Fanout, members: family.Members, children: family.Children) -> set[views.Key]:
    """The keys a fan-out reaches through the two indexes."""
    found: set[views.Key] = set()
    if change.root:
        for member in members(change.root):
            if not (change.activation and family.is_activated(member)):
                found.add(refs.key_of(member))
    found.update(refs.key_of(c) for c in children(change.parent))
    return found
