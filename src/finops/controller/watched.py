"""What the controller keeps of each watched Offering, Subscription and Namespace.

Why: at 10k Subscriptions the watch stores are most of the controller's memory, and most of an
object as the API server sends it is never read here: `managedFields` (every manager's field
set), kubectl's last-applied copy of the whole manifest, timestamps nobody decides on. A
projection keeps the fields some reader uses and drops the rest:

- `apiVersion`, `kind`: Events name the object they are about;
- metadata name, namespace, uid, resourceVersion, generation, labels, annotations, finalizers,
  deletionTimestamp, ownerReferences: keys, the finalizer and status patches' preconditions,
  the ledger mirror's version, the wake-up rules;
- the last-applied annotation and managedFields only as far as the explicit-policy decision
  reads them (`subscriptions.policy_evidence`);
- `spec` and `status` whole: the decisions read most of both, the ledger mirror writes the
  whole spec, a status write patches against the status observed, and `/metrics` reads
  `status.costs`.

Strings are interned, so a namespace's or an Offering's name, condition types and reasons and
every dict key are held once however many objects repeat them. Status writes and finalizer
patches return the full object as written; only what the watch stores keep is projected.
A projected Offering or Subscription is a `views.Frozen` body: never modified, so its
Subscription view is parsed once.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from finops.api import bodies, views
from finops.hierarchy import subscriptions

KEPT_TOP = ("apiVersion", "kind", "spec", "status")
KEPT_META = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "labels",
    "annotations",
    "finalizers",
    "deletionTimestamp",
    "ownerReferences",
)
INTERN_UP_TO = 128
"""Longer strings (messages, manifests) are rarely repeated; interning them would only cost."""


def interned(value: Any) -> Any:
    """A copy of a JSON value whose keys and short strings are interned."""
    if isinstance(value, str):
        return sys.intern(value) if len(value) <= INTERN_UP_TO else value
    if isinstance(value, dict):
        return {sys.intern(str(k)): interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [interned(v) for v in value]
    return value


def _metadata(meta: bodies.ObjectMetaBody) -> dict[str, Any]:
    whole: Mapping[str, object] = meta
    kept = {k: whole[k] for k in KEPT_META if k in whole}
    evidence = subscriptions.policy_evidence(meta)
    if "annotations" in evidence:  # the object has annotations, the long one cut down
        kept["annotations"] = {**(meta.get("annotations") or {}), **evidence.pop("annotations")}
    small: dict[str, Any] = interned(kept)
    small.update(evidence)  # shared constants, already small
    return small


def hierarchy_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An Offering or Subscription as its watch store keeps it."""
    kept = views.Frozen({k: interned(obj[k]) for k in KEPT_TOP if k in obj})
    kept["metadata"] = _metadata(bodies.as_subscription(obj).get("metadata") or {})
    return kept


def offering(obj: Mapping[str, Any]) -> bodies.OfferingBody:
    """An Offering as its watch store keeps it."""
    return bodies.as_offering(hierarchy_object(obj))


def subscription(obj: Mapping[str, Any]) -> bodies.SubscriptionBody:
    """A Subscription as its watch store keeps it."""
    return bodies.as_subscription(hierarchy_object(obj))


def namespace(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A Namespace as the mirror reads it: its name and labels."""
    meta = obj.get("metadata") or {}
    kept = {k: meta[k] for k in ("name", "resourceVersion", "labels") if k in meta}
    return {"metadata": interned(kept)}
