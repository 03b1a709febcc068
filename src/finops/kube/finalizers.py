"""Our own finalizers, added and removed with JSON patches that test `resourceVersion` first.

A patch computed from a stale read fails (409 on the version, 422 on a failed `test` op)
instead of clobbering someone else's finalizer list; callers requeue and try again from a
fresh read. Both return the object as written, or None when nothing was written.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

import lightkube

from finops.api import bodies
from finops.kube import client as kube_client

CONFLICT_CODES = (409, 422)

Body = TypeVar("Body", bound=bodies.Object)
"""An object of any kind: what is patched comes back as the same kind."""


def _meta(obj: bodies.Object) -> bodies.ObjectMetaBody:
    return obj.get("metadata") or bodies.ObjectMetaBody()


def add_ops(obj: bodies.Object, finalizer: str) -> list[dict[str, object]] | None:
    """The JSON patch appending `finalizer`, or None when it is already there."""
    meta = _meta(obj)
    current = list(meta.get("finalizers") or ())
    if finalizer in current:
        return None
    ops: list[dict[str, object]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")}
    ]
    if current:
        ops.append({"op": "add", "path": "/metadata/finalizers/-", "value": finalizer})
    else:
        ops.append({"op": "add", "path": "/metadata/finalizers", "value": [finalizer]})
    return ops


def remove_ops(obj: bodies.Object, finalizer: str) -> list[dict[str, object]] | None:
    """The JSON patch removing `finalizer` at its index, or None when it is absent."""
    meta = _meta(obj)
    current = list(meta.get("finalizers") or ())
    if finalizer not in current:
        return None
    index = current.index(finalizer)
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")},
        {"op": "test", "path": f"/metadata/finalizers/{index}", "value": finalizer},
        {"op": "remove", "path": f"/metadata/finalizers/{index}"},
    ]


async def _patch(
    client: lightkube.AsyncClient, res: Any, obj: Body, ops: list[dict[str, object]]
) -> Body:
    meta = _meta(obj)
    written = await client.patch(
        res,
        str(meta.get("name")),
        ops,
        namespace=str(meta.get("namespace")),
        patch_type=lightkube.types.PatchType.JSON,
    )
    return cast(Body, kube_client.to_dict(written))


async def add(client: lightkube.AsyncClient, res: Any, obj: Body, finalizer: str) -> Body | None:
    """Append `finalizer` (namespaced `res`); ApiError 409/422 means the read was stale."""
    ops = add_ops(obj, finalizer)
    return None if ops is None else await _patch(client, res, obj, ops)


async def remove(client: lightkube.AsyncClient, res: Any, obj: Body, finalizer: str) -> Body | None:
    """Remove `finalizer`; ApiError 409/422 means the read was stale."""
    ops = remove_ops(obj, finalizer)
    return None if ops is None else await _patch(client, res, obj, ops)
