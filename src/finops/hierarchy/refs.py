"""Identities and lookups shared by the Offering and Subscription decisions.

References in this API always carry an explicit namespace, so an object is named by
`(namespace, name)` everywhere, printed as `namespace/name` in messages.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterable
from typing import TypeAlias, TypeVar

from finops.api import bodies, conditions, views


@dataclasses.dataclass(frozen=True, slots=True)
class ReadError:
    """A read that failed for a reason other than "not found" (transient; retried)."""

    message: str


B = TypeVar("B", bound=bodies.Object)

Observed: TypeAlias = B | ReadError | None
"""The result of reading one object: the body, a failed read, or None for not found."""

Lookup: TypeAlias = Callable[[views.Key], Observed[B]]
"""How a decision reads other objects of one kind by key (usually the watch cache)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes Event the reconciler should record on the object it decided about."""

    type: str
    reason: str
    message: str


def key_of(obj: bodies.Object) -> views.Key:
    meta = obj.get("metadata") or {}
    return views.Key(str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def uid_of(obj: bodies.Object) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def generation_of(obj: bodies.Object) -> int | None:
    value = (obj.get("metadata") or {}).get("generation")
    return value if isinstance(value, int) else None


def is_deleting(obj: bodies.Object) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def is_ready(obj: bodies.Object) -> bool:
    """`status.ready` is the string "True" (the printer column every gate reads)."""
    status = obj.get("status")
    return isinstance(status, dict) and str(status.get("ready", "")) == "True"


def timestamp(now: dt.datetime) -> str:
    """`now` as metav1.Time serialises it (aware UTC required)."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    return conditions.rfc3339(now)


def joined(keys: Iterable[views.Key]) -> str:
    return ", ".join(str(k) for k in keys)
