"""A plain GET of any object named by apiVersion, kind, namespace and name.

The Subscription target gate names its target by kind, but a GET needs the plural resource
name, which only the API's discovery documents know (`/api/v1`, `/apis/<group>/<version>`).
Found plurals are cached per (apiVersion, kind); misses are not, so a CRD installed later is
seen at the next look. lightkube has no call for discovery or for an untyped GET by path, so
these two requests go through its underlying HTTP client (the connection, TLS and auth stay
lightkube's).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import lightkube


class TargetReadError(Exception):
    """Discovery or the GET failed for a reason other than "not found"."""


@dataclasses.dataclass(frozen=True, slots=True)
class ResourceName:
    """What discovery says about one kind."""

    plural: str
    namespaced: bool


def api_base(api_version: str) -> str:
    """`/api/v1` for the core group, `/apis/<group>/<version>` otherwise."""
    if "/" in api_version:
        return f"/apis/{api_version}"
    return f"/api/{api_version}"


def find_kind(discovery: dict[str, Any], kind: str) -> ResourceName | None:
    """The top-level resource (not a subresource like `pods/status`) serving `kind`."""
    for entry in discovery.get("resources") or ():
        name = str(entry.get("name") or "")
        if entry.get("kind") == kind and name and "/" not in name:
            return ResourceName(name, bool(entry.get("namespaced")))
    return None


def object_path(
    api_version: str, found: ResourceName, name: str, namespace: str, default_namespace: str
) -> str:
    """The GET path; a namespaced kind with no namespace given lives in `default_namespace`."""
    base = api_base(api_version)
    if found.namespaced:
        return f"{base}/namespaces/{namespace or default_namespace}/{found.plural}/{name}"
    return f"{base}/{found.plural}/{name}"


class TargetReader:
    """Answers "does this object exist?" with a discovery cache."""

    def __init__(self, client: lightkube.AsyncClient) -> None:
        self.client = client
        self._kinds: dict[tuple[str, str], ResourceName] = {}

    async def _get(self, path: str) -> tuple[int, Any]:
        http = self.client._client._client  # lightkube's configured HTTP client
        try:
            resp = await http.get(path)
        except Exception as exc:
            raise TargetReadError(f"GET {path}: {exc}") from exc
        if resp.status_code != 200:
            return resp.status_code, None
        return 200, resp.json()

    async def resource(self, api_version: str, kind: str) -> ResourceName | None:
        """The plural for `kind`, or None when the API does not serve it."""
        cached = self._kinds.get((api_version, kind))
        if cached is not None:
            return cached
        path = api_base(api_version)
        code, body = await self._get(path)
        if code == 404:
            return None
        if code != 200:
            raise TargetReadError(f"discovery {path}: HTTP {code}")
        found = find_kind(body, kind)
        if found is not None:
            self._kinds[(api_version, kind)] = found
        return found

    async def exists(
        self, api_version: str, kind: str, name: str, namespace: str, default_namespace: str
    ) -> bool:
        """True when the object exists, False on a 404 (or an unserved kind); raises
        `TargetReadError` for anything else."""
        found = await self.resource(api_version, kind)
        if found is None:
            return False
        path = object_path(api_version, found, name, namespace, default_namespace)
        code, _ = await self._get(path)
        if code == 200:
            return True
        if code == 404:
            return False
        raise TargetReadError(f"GET {path}: HTTP {code}")
