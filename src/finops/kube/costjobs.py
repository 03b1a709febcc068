"""The Kubernetes calls of the allocation job: read its CostJob and the PriceBooks, record
the run's outcome on the CostJob's status.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.types import PatchType

from finops.kube import resources

log = logging.getLogger(__name__)


def _as_dict(obj: Any) -> dict[str, Any]:
    """lightkube generic resources → the plain dict the pure core consumes."""
    return dict(obj.to_dict()) if hasattr(obj, "to_dict") else dict(obj)


async def get_costjob(client: AsyncClient, namespace: str, name: str) -> dict[str, Any]:
    """The CostJob as a dict; ApiError (e.g. 404) propagates to the caller."""
    return _as_dict(await client.get(resources.CostJob, name, namespace=namespace))


async def list_pricebooks(client: AsyncClient) -> list[dict[str, Any]]:
    """Every PriceBook of the cluster (the active book may live in any namespace)."""
    return [_as_dict(o) async for o in client.list(resources.PriceBook, namespace="*")]


async def update_costjob_status(
    client: AsyncClient,
    namespace: str,
    name: str,
    change: Callable[[Mapping[str, Any] | None], Mapping[str, Any]],
    attempts: int = 5,
) -> None:
    """Apply `change(current status)` as a merge patch guarded by resourceVersion.

    The patch is computed from a fresh read each attempt, so a concurrent writer makes us
    retry (409) rather than overwrite its history entry.
    """
    for attempt in range(attempts):
        current = await get_costjob(client, namespace, name)
        patch = {
            "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
            "status": dict(change(current.get("status"))),
        }
        try:
            await client.patch(
                resources.CostJob.Status,
                name,
                patch,
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
            return
        except ApiError as exc:
            if exc.status.code != 409 or attempt == attempts - 1:
                raise
            log.info("CostJob %s/%s changed while writing status; retrying", namespace, name)
            await asyncio.sleep(0.1 * (attempt + 1))
