"""List+watch one kind into an in-memory store, telling a callback about every change.

Level-triggered by construction: the callback gets (old, new) and decides which keys to
enqueue; a relist (first start, 410 Gone, broken stream) replays every object and reports
the ones that vanished meanwhile as deletions, so nothing is missed across a gap. Failed
relists back off up to 10 s, so the manager catches up soon after an API server outage.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeAlias, TypeVar

import lightkube

from finops.kube import client as kube_client

log = logging.getLogger(__name__)

Key = tuple[str, str]
B = TypeVar("B", bound=Mapping[str, object])
Handler: TypeAlias = Callable[[str, B | None, B | None], None]
"""(event type, old object or None, new object or None)."""
Projection: TypeAlias = Callable[[dict[str, Any]], B]
"""An object as the API server sent it -> what the store keeps of it (and handlers see): a
typed body (`finops.api.bodies`) for the kinds of this API, the raw JSON for others."""
LIST_CHUNK = 500
"""Objects per page of a relist: a 10k-object list is never one response held in memory."""


def object_key(obj: Mapping[str, object]) -> Key:
    """(namespace, name); namespace is "" for cluster-scoped objects."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return ("", "")
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def raw(body: dict[str, Any]) -> dict[str, Any]:
    """The projection of a kind this package has no typed body for: the JSON as sent."""
    return body


class Source(Generic[B]):
    """One kind, optionally label-filtered, across all namespaces, kept as `project` makes it."""

    def __init__(
        self,
        client: lightkube.AsyncClient,
        res: Any,
        handler: Handler[B],
        project: Projection[B],
        *,
        namespaced: bool = True,
        labels: dict[str, str] | None = None,
        max_backoff: float = 10.0,
    ) -> None:
        self.client = client
        self.res = res
        self.handler = handler
        self.namespaced = namespaced
        self.labels = labels
        self.max_backoff = max_backoff
        self.project = project
        self.store: dict[Key, B] = {}
        self.synced = asyncio.Event()
        self.name = getattr(res, "__name__", str(res))

    def _scope(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self.namespaced:
            kwargs["namespace"] = lightkube.ALL_NS
        if self.labels:
            kwargs["labels"] = self.labels
        return kwargs

    async def _relist(self) -> str:
        listing = self.client.list(self.res, chunk_size=LIST_CHUNK, **self._scope())
        fresh: dict[Key, B] = {}
        async for obj in listing:
            body = self.project(kube_client.to_dict(obj))
            fresh[object_key(body)] = body
        version = str(listing.resourceVersion)
        gone = set(self.store) - set(fresh)
        for key in gone:
            self.handler("DELETED", self.store.pop(key), None)
        for key, body in fresh.items():
            old = self.store.get(key)
            self.store[key] = body
            self.handler("ADDED" if old is None else "MODIFIED", old, body)
        self.synced.set()
        return version

    async def run(self) -> None:
        """Run until cancelled."""
        delay = 0.5
        while True:
            try:
                version = await self._relist()
                delay = 0.5
                async for kind, obj in self.client.watch(
                    self.res, resource_version=version, **self._scope()
                ):
                    body = self.project(kube_client.to_dict(obj))
                    key = object_key(body)
                    old = self.store.get(key)
                    if kind == "DELETED":
                        self.store.pop(key, None)
                        self.handler("DELETED", old, None)
                    elif kind in ("ADDED", "MODIFIED"):
                        self.store[key] = body
                        self.handler(kind, old, body)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if kube_client.status_code(exc) == 410:
                    log.info("watch expired; relisting", extra={"kind": self.name})
                    continue
                log.warning("watch failed; relisting", extra={"kind": self.name, "error": str(exc)})
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
