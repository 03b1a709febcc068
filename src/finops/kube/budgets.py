"""The Kubernetes reads a charge run makes for Budgets (their status goes through
`finops.kube.status` and their Events through `finops.kube.events`, like every other kind)."""

from __future__ import annotations

from typing import cast

from lightkube import AsyncClient

from finops.api import bodies
from finops.kube import client as kube_client
from finops.kube import resources

LIST_CHUNK = 500


async def list_budgets(client: AsyncClient, namespace: str = "*") -> list[bodies.BudgetBody]:
    """Every Budget of the cluster (or of one namespace), in pages."""
    return [
        cast(bodies.BudgetBody, kube_client.to_dict(o))
        async for o in client.list(resources.Budget, namespace=namespace, chunk_size=LIST_CHUNK)
    ]
