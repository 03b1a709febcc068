"""metav1.Condition bookkeeping: one function that sets a condition the Kubernetes way.

`lastTransitionTime` moves only when `status` changes; reason, message and
observedGeneration follow the latest decision. Pure: the caller passes `now`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, cast

from finops.api import bodies

_Entry = TypeVar("_Entry", bound=Mapping[str, Any])


@dataclasses.dataclass(frozen=True, slots=True)
class DecidedCondition:
    """A decided condition, before it meets the object's current list."""

    type: str
    status: str
    reason: str
    message: str


def rfc3339(moment: dt.datetime) -> str:
    """Seconds-precision UTC timestamp as metav1.Time serialises."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def find(conditions: Sequence[_Entry] | None, type_: str) -> _Entry | None:
    """The condition of one type, or None."""
    for cond in conditions or ():
        if cond.get("type") == type_:
            return cond
    return None


def in_status(status: Mapping[str, object], type_: str) -> Mapping[str, object] | None:
    """The condition of one type in a status as the API server sent it, or None; a
    `conditions` that is not a list, and entries that are not objects, count as absent."""
    found = status.get("conditions")
    for cond in found if isinstance(found, list) else ():
        if isinstance(cond, Mapping) and cond.get("type") == type_:
            return cond
    return None


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    new: DecidedCondition,
    *,
    generation: int | None,
    now: dt.datetime,
) -> list[bodies.ConditionBody]:
    """A new list with `new` applied; other types keep their place and content."""
    old = find(conditions, new.type)
    transition = (
        str(old["lastTransitionTime"])
        if old is not None and old.get("status") == new.status and old.get("lastTransitionTime")
        else rfc3339(now)
    )
    entry: bodies.ConditionBody = {
        "type": new.type,
        "status": new.status,
        "reason": new.reason,
        "message": new.message,
        "lastTransitionTime": transition,
    }
    if generation is not None:
        entry["observedGeneration"] = generation
    result: list[bodies.ConditionBody] = []
    placed = False
    for cond in conditions or ():
        if cond.get("type") == new.type:
            result.append(entry)
            placed = True
        else:
            result.append(cast(bodies.ConditionBody, dict(cond)))
    if not placed:
        result.append(entry)
    return result
