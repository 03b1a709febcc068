"""Status written as one merge patch per pass, guarded by `resourceVersion`.

Only top-level status keys that changed are sent (a key that must disappear is sent as null),
so fields owned by someone else, such as the charge job's `status.costs`, travel only as the
precondition says they were. A stale read fails with 409 instead of overwriting newer state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightkube

from finops.kube import client as kube_client


def patch_body(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> dict[str, Any]:
    """Changed keys of `desired`, and null for keys of `current` it dropped."""
    before = dict(current or {})
    body: dict[str, Any] = {
        k: v for k, v in desired.items() if before.get(k) != v or k not in before
    }
    for gone in set(before) - set(desired):
        body[gone] = None
    return body


async def write(
    client: lightkube.AsyncClient,
    res: Any,
    obj: Mapping[str, Any],
    desired: Mapping[str, Any],
) -> dict[str, Any]:
    """Patch `res.Status` of the namespaced `obj` to `desired`; returns the object as written."""
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    body = {
        "metadata": {"resourceVersion": meta.get("resourceVersion")},
        "status": patch_body(obj.get("status"), desired),
    }
    return await kube_client.merge_patch(
        client, res.Status, str(meta.get("name")), body, namespace=str(meta.get("namespace"))
    )
