"""Every observed version of Offerings and Subscriptions, mirrored into the ledger.

Charge rows point at the version that priced them, so the controller records each version as
it sees it: an Offering per (uid, generation), a Subscription per (uid, generation, namespace
labels, its own labels). The database is never on the Kubernetes path: reconcilers write
status first and mirror afterwards, a failure is logged, counted on /metrics and retried by
requeueing the key, and the connection is reopened on the next attempt. Versions already
written by this process are remembered, so a steady cluster costs no queries.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import prometheus_client

from finops.api import bodies
from finops.controller import metrics
from finops.store import mirror, pool

log = logging.getLogger(__name__)

T = TypeVar("T")

MIRROR_WRITES = prometheus_client.Counter(
    "finops_ledger_mirror_writes_total",
    "Offering and Subscription versions mirrored into the ledger, by result.",
    ["kind", "result"],
    registry=metrics.REGISTRY,
)


class MirrorError(Exception):
    """The ledger could not be written (the message carries no secrets)."""


def _meta(obj: bodies.Object) -> bodies.ObjectMetaBody:
    return obj.get("metadata") or {}


def offering_version(obj: bodies.OfferingBody) -> tuple[str, ...]:
    """What makes an Offering version distinct."""
    meta = _meta(obj)
    return ("Offering", str(meta.get("uid")), str(meta.get("generation")))


def subscription_labels(obj: bodies.SubscriptionBody) -> dict[str, str]:
    """The Subscription's own `metadata.labels` (labels change without a new generation)."""
    labels = _meta(obj).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


def subscription_version(
    obj: bodies.SubscriptionBody, labels: Mapping[str, str]
) -> tuple[str, ...]:
    """What makes a Subscription version distinct: its generation, its namespace's labels and
    its own labels."""
    meta = _meta(obj)
    both = [dict(labels), subscription_labels(obj)]
    digest = hashlib.sha256(json.dumps(both, sort_keys=True).encode()).hexdigest()
    return ("Subscription", str(meta.get("uid")), str(meta.get("generation")), digest)


@dataclasses.dataclass(frozen=True)
class Version:
    """The columns both version tables share."""

    cluster: str
    uid: str
    namespace: str
    name: str
    generation: int
    resource_version: str
    spec: Mapping[str, object]

    def columns(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Mirror:
    """One connection, used from worker threads one call at a time."""

    def __init__(self, dsn: str, cluster: str) -> None:
        self.dsn = dsn
        self.cluster = cluster
        self._session = pool.Session(dsn, connect_timeout=5)
        self._seen: set[tuple[str, ...]] = set()

    def _call(self, fn: Callable[[pool.Connection], T]) -> T:
        try:
            return self._session.run(fn)
        except pool.LedgerError as exc:
            raise MirrorError(str(exc)) from None

    async def _write(
        self, kind: str, version: tuple[str, ...], fn: Callable[[pool.Connection], int]
    ) -> bool:
        """True when a row was upserted now, False when this version was already mirrored."""
        if version in self._seen:
            return False
        try:
            await asyncio.to_thread(self._call, fn)
        except MirrorError:
            MIRROR_WRITES.labels(kind=kind, result="error").inc()
            raise
        self._seen.add(version)
        MIRROR_WRITES.labels(kind=kind, result="success").inc()
        return True

    def _version(self, obj: bodies.Object, spec: Mapping[str, object]) -> Version:
        """The columns both version tables share, read from the object."""
        meta = _meta(obj)
        return Version(
            cluster=self.cluster,
            uid=str(meta.get("uid")),
            namespace=str(meta.get("namespace")),
            name=str(meta.get("name")),
            generation=int(meta.get("generation") or 0),
            resource_version=str(meta.get("resourceVersion") or ""),
            spec=spec,
        )

    async def offering(self, obj: bodies.OfferingBody) -> bool:
        version = self._version(obj, obj.get("spec") or {})

        def write(conn: pool.Connection) -> int:
            return mirror.upsert_offering_version(conn, **version.columns())

        return await self._write("Offering", offering_version(obj), write)

    async def subscription(self, obj: bodies.SubscriptionBody, labels: Mapping[str, str]) -> bool:
        version = self._version(obj, obj.get("spec") or {})

        def write(conn: pool.Connection) -> int:
            return mirror.upsert_subscription_version(
                conn,
                **version.columns(),
                namespace_labels=labels,
                subscription_labels=subscription_labels(obj),
            )

        return await self._write("Subscription", subscription_version(obj, labels), write)

    def close(self) -> None:
        self._session.close()


class Backoff:
    """Per-key retry delays for work that failed outside Kubernetes (the ledger, a read)."""

    def __init__(self, base: float = 1.0, cap: float = 60.0) -> None:
        self.base = base
        self.cap = cap
        self._failures: dict[Any, int] = {}

    def failed(self, key: Any) -> float:
        count = self._failures.get(key, 0)
        self._failures[key] = count + 1
        return float(min(self.base * (2**count), self.cap))

    def succeeded(self, key: Any) -> None:
        self._failures.pop(key, None)


async def mirrored(
    backoff: Backoff,
    key: tuple[str, str, str],
    write: Callable[[], Awaitable[object]],
    failures: tuple[type[Exception], ...] = (MirrorError,),
) -> float | None:
    """Run one reconciler's mirror write: None when it went through, else the delay before the
    key is tried again (the failure logged with the object it was for; reconciles go on)."""
    kind, name = key[0], "/".join(key[1:])
    try:
        await write()
    except failures as exc:
        delay = backoff.failed(key)
        log.warning(
            f"could not mirror {kind.lower()} version",
            extra={kind.lower(): name, "error": str(exc), "retry_in": delay},
        )
        return delay
    backoff.succeeded(key)
    return None
