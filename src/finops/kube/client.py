"""The one place that builds a Kubernetes API client and turns its answers into plain dicts.

Reconcilers work on raw object dicts (what the pure core takes); lightkube is the transport.
Core kinds use lightkube's typed models, our kinds its generic (dict) resources; both are
converted with `to_dict()` so callers never see either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightkube
from lightkube import config as lk_config

FIELD_MANAGER = "finops-operator"

# Re-exported resource classes so callers import one module for every kind they touch.


def make_client(timeout: float = 30.0) -> lightkube.AsyncClient:
    """In-cluster service account first, else `$KUBECONFIG` (what tests and local runs use)."""
    import httpx2

    config = lk_config.kubeconfig.KubeConfig.from_env()
    return lightkube.AsyncClient(
        config=config, field_manager=FIELD_MANAGER, timeout=httpx2.Timeout(timeout)
    )


def to_dict(obj: Any) -> dict[str, Any]:
    """A lightkube object (typed or generic) as the raw dict the API server sent."""
    if obj is None:
        return {}
    if isinstance(obj, Mapping) and not hasattr(obj, "to_dict"):
        return dict(obj)
    result: dict[str, Any] = obj.to_dict()
    return result


def status_code(exc: BaseException) -> int | None:
    """HTTP status of an API error, or None for anything else."""
    if isinstance(exc, lightkube.ApiError):
        code = getattr(exc.status, "code", None)
        return int(code) if code is not None else None
    return None


async def get_or_none(
    client: lightkube.AsyncClient, res: Any, name: str, namespace: str | None = None
) -> dict[str, Any] | None:
    """GET one object; a 404 is None rather than an error."""
    try:
        if namespace is None:
            obj = await client.get(res, name)
        else:
            obj = await client.get(res, name, namespace=namespace)
    except lightkube.ApiError as exc:
        if status_code(exc) == 404:
            return None
        raise
    return to_dict(obj)


async def create(
    client: lightkube.AsyncClient, res: Any, body: Mapping[str, Any]
) -> dict[str, Any]:
    """POST a new object given as a dict."""
    return to_dict(await client.create(res.from_dict(dict(body))))


async def replace(
    client: lightkube.AsyncClient, res: Any, body: Mapping[str, Any], *, dry_run: bool = False
) -> dict[str, Any]:
    """PUT a whole object (its `metadata.resourceVersion` is the precondition)."""
    return to_dict(await client.replace(res.from_dict(dict(body)), dry_run=dry_run))


async def merge_patch(
    client: lightkube.AsyncClient,
    res: Any,
    name: str,
    patch: Mapping[str, Any],
    namespace: str | None = None,
) -> dict[str, Any]:
    """JSON merge patch; pass `res.Status` to patch the status subresource."""
    kwargs: dict[str, Any] = {"patch_type": lightkube.types.PatchType.MERGE}
    if namespace is not None:
        kwargs["namespace"] = namespace
    return to_dict(await client.patch(res, name, dict(patch), **kwargs))


async def delete(
    client: lightkube.AsyncClient, res: Any, name: str, namespace: str | None = None
) -> bool:
    """DELETE; False when it was already gone."""
    try:
        if namespace is None:
            await client.delete(res, name)
        else:
            await client.delete(res, name, namespace=namespace)
    except lightkube.ApiError as exc:
        if status_code(exc) == 404:
            return False
        raise
    return True
