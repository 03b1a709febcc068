"""The Kubernetes reads of the allocation job: its CostJob and the PriceBooks (the run's
outcome is written through `finops.kube.status` like every status write).
"""

from __future__ import annotations

from typing import Any

from lightkube import AsyncClient

from finops.kube import resources


def _as_dict(obj: Any) -> dict[str, Any]:
    """lightkube generic resources → the plain dict the pure core consumes."""
    return dict(obj.to_dict()) if hasattr(obj, "to_dict") else dict(obj)


async def get_costjob(client: AsyncClient, namespace: str, name: str) -> dict[str, Any]:
    """The CostJob as a dict; ApiError (e.g. 404) propagates to the caller."""
    return _as_dict(await client.get(resources.CostJob, name, namespace=namespace))


async def list_pricebooks(client: AsyncClient) -> list[dict[str, Any]]:
    """Every PriceBook of the cluster (the active book may live in any namespace)."""
    return [_as_dict(o) async for o in client.list(resources.PriceBook, namespace="*")]
