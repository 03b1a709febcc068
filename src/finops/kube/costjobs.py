"""The Kubernetes reads of the allocation job: its CostJob and the PriceBooks (the run's
outcome is written through `finops.kube.status` like every status write).
"""

from __future__ import annotations

from lightkube import AsyncClient

from finops.api import bodies
from finops.kube import client as kube_client
from finops.kube import resources


async def get_costjob(client: AsyncClient, namespace: str, name: str) -> bodies.CostJobBody:
    """The CostJob; ApiError (e.g. 404) propagates to the caller."""
    found = await client.get(resources.CostJob, name, namespace=namespace)
    return bodies.as_costjob(kube_client.to_dict(found))


async def list_pricebooks(client: AsyncClient) -> list[bodies.PriceBookBody]:
    """Every PriceBook of the cluster (the active book may live in any namespace)."""
    listing = client.list(resources.PriceBook, namespace="*")
    return [bodies.as_pricebook(kube_client.to_dict(o)) async for o in listing]
