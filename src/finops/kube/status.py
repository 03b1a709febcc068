"""The one way status is written: small pure changes applied to a read, as one merge patch
guarded by `resourceVersion`, skipped when nothing changed, retried on conflict.

A change is a pure function from the object as read to its whole status after the change
(`set_fields`, `replace`, or the caller's own). `apply` runs the changes in order on the
object, sends only the top-level status keys that differ (a dropped key as null), so fields
owned by someone else, such as the charge job's `status.costs`, travel only as the
precondition says they were. A 409 re-reads the object and recomputes the changes from the
fresh read, up to `attempts` times; a reconciler whose Events were decided from the object it
observed passes `attempts=1` and requeues instead, so its whole decision is made again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

import lightkube

from finops.api import conditions
from finops.kube import client as kube_client

log = logging.getLogger(__name__)

Body = TypeVar("Body", bound=Mapping[str, object])
"""An object of any kind: a status write returns the same kind."""

Change = Callable[[Mapping[str, object]], Mapping[str, object]]
"""The object as read → its whole status after the change (the object is not modified)."""


def patch_body(
    current: Mapping[str, object] | None, desired: Mapping[str, object]
) -> dict[str, object]:
    """Changed keys of `desired`, and null for keys of `current` it dropped."""
    before = dict(current or {})
    body: dict[str, object] = {
        k: v for k, v in desired.items() if before.get(k) != v or k not in before
    }
    for gone in set(before) - set(desired):
        body[gone] = None
    return body


def status_of(obj: Mapping[str, object]) -> dict[str, object]:
    """A copy of the object's status (empty when it has none)."""
    status = obj.get("status")
    return dict(status) if isinstance(status, Mapping) else {}


def metadata_of(obj: Mapping[str, object]) -> Mapping[str, object]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def replace(desired: Mapping[str, object]) -> Change:
    """The status becomes `desired` (a reconciler's pure plan of the whole status)."""
    return lambda _obj: desired


def set_fields(fields: Mapping[str, object]) -> Change:
    """The given top-level status fields take these values; the others stay."""
    return lambda obj: {**status_of(obj), **fields}


def set_condition(condition: conditions.DecidedCondition, now: dt.datetime) -> Change:
    """`condition` set in `status.conditions` for the object's generation (its transition
    time moves only when its status does)."""

    def change(obj: Mapping[str, object]) -> Mapping[str, object]:
        status = status_of(obj)
        generation = metadata_of(obj).get("generation")
        current = status.get("conditions")
        status["conditions"] = conditions.set_condition(
            current if isinstance(current, list) else None,
            condition,
            generation=generation if isinstance(generation, int) else None,
            now=now,
        )
        return status

    return change


def unless(keep: Callable[[Mapping[str, object]], bool], changes: Sequence[Change]) -> Change:
    """`changes` in order, unless `keep` holds for the object as read: then its status stays.
    Judged on every read, so a retry after a conflict decides again on the fresh object."""

    def change(obj: Mapping[str, object]) -> Mapping[str, object]:
        if keep(obj):
            return status_of(obj)
        return _after(obj, changes)

    return change


@dataclasses.dataclass(frozen=True)
class Applied:
    """What `apply` did: the object as written (or as read when nothing changed; None when it
    is gone) and whether a patch was sent."""

    obj: dict[str, object] | None
    written: bool


def _after(obj: Mapping[str, object], changes: Sequence[Change]) -> dict[str, object]:
    status = status_of(obj)
    for change in changes:
        status = dict(change({**obj, "status": status}))
    return status


async def apply(
    client: lightkube.AsyncClient,
    res: Any,
    name: str,
    changes: Sequence[Change],
    *,
    namespace: str | None = None,
    observed: Mapping[str, object] | None = None,
    attempts: int = 5,
) -> Applied:
    """Apply `changes` to the status of `res` `namespace/name`.

    The first attempt uses `observed` (the object as just read) when given, else a fresh GET;
    every retry after a 409 reads the object again.
    """
    current: Mapping[str, object] | None = observed
    for attempt in range(attempts):
        if current is None:
            current = await kube_client.get_or_none(client, res, name, namespace)
            if current is None:
                return Applied(None, False)
        before, after = status_of(current), _after(current, changes)
        if after == before:
            return Applied(dict(current), False)
        body = {
            "metadata": {"resourceVersion": metadata_of(current).get("resourceVersion")},
            "status": patch_body(before, after),
        }
        try:
            written = await kube_client.merge_patch(
                client, res.Status, name, body, namespace=namespace
            )
            return Applied(written, True)
        except lightkube.ApiError as exc:
            if kube_client.status_code(exc) != 409 or attempt == attempts - 1:
                raise
        where = name if namespace is None else f"{namespace}/{name}"
        log.info("%s %s changed while writing status; retrying", res.__name__, where)
        await asyncio.sleep(0.05 * (attempt + 1))
        current = None
    raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover


async def write(
    client: lightkube.AsyncClient,
    res: Any,
    obj: Body,
    desired: Mapping[str, object],
) -> Body:
    """A reconciler's whole planned status for the namespaced `obj` it observed; a conflict
    raises (409) so the reconciler requeues and decides again. Returns the object after."""
    meta = metadata_of(obj)
    done = await apply(
        client,
        res,
        str(meta.get("name")),
        [replace(desired)],
        namespace=str(meta.get("namespace")),
        observed=obj,
        attempts=1,
    )
    return cast(Body, done.obj) if done.obj is not None else cast(Body, dict(obj))
