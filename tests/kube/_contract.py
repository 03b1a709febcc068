"""Helpers for the contract tests: send corpus objects to the real API server."""

from __future__ import annotations

import copy
from typing import Any

import httpx

from finops.api import models

DRY_RUN = {"dryRun": "All"}


def collection_url(kind: str, namespace: str | None) -> str:
    model = models.BY_KIND[kind]
    base = f"/apis/{models.API_VERSION}"
    if model.namespaced:
        return f"{base}/namespaces/{namespace}/{model.plural}"
    return f"{base}/{model.plural}"


def object_url(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{collection_url(obj['kind'], meta.get('namespace'))}/{meta['name']}"


def placed(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """A copy of `obj` moved into the test's namespace (cluster-scoped kinds keep none)."""
    out = copy.deepcopy(obj)
    if models.BY_KIND[out["kind"]].namespaced:
        out["metadata"]["namespace"] = namespace
    else:
        out["metadata"].pop("namespace", None)
    return out


def causes(resp: httpx.Response) -> list[str]:
    """The field errors of a 422 as `field: message`, the offline validator's format."""
    assert resp.status_code == 422, f"expected a refusal, got {resp.status_code}: {resp.text}"
    details = resp.json().get("details", {})
    return [f"{c.get('field', '<nil>')}: {c['message']}" for c in details.get("causes", [])]


def create(client: httpx.Client, obj: dict[str, Any], dry_run: bool = False) -> httpx.Response:
    url = collection_url(obj["kind"], obj["metadata"].get("namespace"))
    return client.post(url, json=obj, params=DRY_RUN if dry_run else None)


def replace(
    client: httpx.Client, stored: dict[str, Any], new: dict[str, Any], dry_run: bool = False
) -> httpx.Response:
    """PUT `new` over `stored` (carrying its resourceVersion)."""
    body = copy.deepcopy(new)
    body["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
    return client.put(object_url(stored), json=body, params=DRY_RUN if dry_run else None)


def delete_if_cluster_scoped(client: httpx.Client, obj: dict[str, Any]) -> None:
    """Namespaced leftovers die with their throwaway namespace; the singleton must go now."""
    if not models.BY_KIND[obj["kind"]].namespaced:
        client.delete(object_url(obj))
