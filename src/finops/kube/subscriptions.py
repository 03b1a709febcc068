"""The Kubernetes reads of the charge collection job (Subscriptions, Offerings, namespace
labels) and the finalizer release of a settled Subscription (its `status.costs` goes through
`finops.kube.status` like every status write).

The release is a JSON patch that tests `resourceVersion` and the entry, so a release decided
from a stale read fails (409, or 422 for a failed test) instead of removing a finalizer the
fresh object should keep; on retry the caller's `still_allowed` is asked of the fresh read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources import core_v1
from lightkube.types import PatchType

from finops.api import bodies
from finops.kube import client as kube_client
from finops.kube import resources

log = logging.getLogger(__name__)

_RETRY_CODES = (409, 422)
LIST_CHUNK = 500


async def list_subscriptions(
    client: AsyncClient, namespace: str = "*"
) -> list[bodies.SubscriptionBody]:
    """Every Subscription of the cluster (or of one namespace), in pages."""
    return [
        cast(bodies.SubscriptionBody, kube_client.to_dict(o))
        async for o in client.list(
            resources.Subscription, namespace=namespace, chunk_size=LIST_CHUNK
        )
    ]


async def get_offering(client: AsyncClient, namespace: str, name: str) -> bodies.OfferingBody:
    """One Offering; ApiError (404 included) propagates: a missing Offering is a failure."""
    found = await client.get(resources.Offering, name, namespace=namespace)
    return cast(bodies.OfferingBody, kube_client.to_dict(found))


async def get_subscription(
    client: AsyncClient, namespace: str, name: str
) -> bodies.SubscriptionBody | None:
    """One Subscription, None when it is gone."""
    found = await kube_client.get_or_none(client, resources.Subscription, name, namespace)
    return cast("bodies.SubscriptionBody | None", found)


async def namespace_labels(client: AsyncClient) -> dict[str, dict[str, str]]:
    """Labels of every namespace (the Subscription mirror records them per version)."""
    labels: dict[str, dict[str, str]] = {}
    async for ns in client.list(core_v1.Namespace, chunk_size=LIST_CHUNK):
        meta = ns.metadata
        if meta is not None and meta.name:
            labels[meta.name] = dict(meta.labels or {})
    return labels


def _meta(obj: Mapping[str, Any]) -> bodies.ObjectMetaBody:
    meta: bodies.ObjectMetaBody = obj.get("metadata") or bodies.ObjectMetaBody()
    return meta


async def remove_finalizer(
    client: AsyncClient,
    subscription: Mapping[str, Any],
    finalizer: str,
    still_allowed: Callable[[bodies.SubscriptionBody], bool] = lambda _: True,
    attempts: int = 5,
) -> bool:
    """Remove `finalizer` with a JSON patch that first tests resourceVersion and the entry.

    A conflict re-reads the object and asks `still_allowed(fresh object)` before trying
    again. True when this call removed it; False when it was already gone (or the object is).
    """
    current: Mapping[str, Any] | None = subscription
    meta = _meta(subscription)
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    for attempt in range(attempts):
        if current is None:
            return False
        finalizers = list(_meta(current).get("finalizers") or ())
        if finalizer not in finalizers:
            return False
        index = finalizers.index(finalizer)
        ops = [
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": _meta(current).get("resourceVersion"),
            },
            {"op": "test", "path": f"/metadata/finalizers/{index}", "value": finalizer},
            {"op": "remove", "path": f"/metadata/finalizers/{index}"},
        ]
        try:
            await client.patch(
                resources.Subscription, name, ops, namespace=namespace, patch_type=PatchType.JSON
            )
            return True
        except ApiError as exc:
            if exc.status.code == 404:
                return False
            if exc.status.code not in _RETRY_CODES or attempt == attempts - 1:
                raise
        log.info("Subscription %s/%s changed while releasing; retrying", namespace, name)
        await asyncio.sleep(0.05 * (attempt + 1))
        current = await get_subscription(client, namespace, name)
        if current is not None and not still_allowed(current):
            return False
    return False  # pragma: no cover - the loop returns or raises
