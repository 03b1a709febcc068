"""Kubernetes Events on the transitions users care about.

Events are best effort: a failure to record one is logged and never fails a reconcile.
`Recorder` posts them in the background, as client-go's event recorder does, so a reconcile
does not wait for the round trip; its queue is bounded (a full queue makes the reconcile
wait, nothing is dropped) and `close` sends what is still queued before the manager exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Mapping

import lightkube
from lightkube.resources import core_v1

from finops.api import bodies, conditions
from finops.kube import client as kube_client

COMPONENT = "finops-operator"
NORMAL = "Normal"
WARNING = "Warning"

log = logging.getLogger(__name__)


def event_body(
    involved: bodies.Object, type_: str, reason: str, message: str, now: dt.datetime
) -> dict[str, object]:
    """A core/v1 Event about `involved`; cluster-scoped objects get theirs in `default`."""
    meta = involved.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    stamp = conditions.rfc3339(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": involved.get("apiVersion"),
            "kind": involved.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


async def record(
    client: lightkube.AsyncClient,
    involved: bodies.Object,
    type_: str,
    reason: str,
    message: str,
) -> None:
    """Post one Event; swallow and log API errors."""
    await _post(client, event_body(involved, type_, reason, message, dt.datetime.now(dt.UTC)))


async def post_once(
    client: lightkube.AsyncClient,
    involved: bodies.Object,
    name: str,
    event: tuple[str, str, str],
    now: dt.datetime,
) -> bool:
    """Post the Event `name` (type, reason, message) unless it exists: True when this call
    created it, False when an earlier post had (the API server refused it with 409). Other
    errors raise: the caller must try again rather than think it was posted."""
    body = event_body(involved, *event, now)
    namespace = (involved.get("metadata") or {}).get("namespace") or "default"
    body["metadata"] = {"name": name, "namespace": namespace}
    try:
        await kube_client.create(client, core_v1.Event, body)
    except lightkube.ApiError as exc:
        if kube_client.status_code(exc) != 409:
            raise
        return False
    return True


async def _post(client: lightkube.AsyncClient, body: Mapping[str, object]) -> None:
    try:
        await kube_client.create(client, core_v1.Event, body)
    except Exception as exc:  # best effort by design
        log.warning("could not record event", extra={"reason": body["reason"], "error": str(exc)})


class Recorder:
    """Events posted by a few background senders from a bounded queue.

    Each Event is stamped when it is recorded (the decision's time, not the send's); one
    object's Events are posted in the order they were recorded when `senders` is 1, and
    within a few milliseconds of each other otherwise (they are decided seconds apart).
    """

    def __init__(
        self, client: lightkube.AsyncClient, *, senders: int = 4, capacity: int = 1024
    ) -> None:
        self.client = client
        self.senders = senders
        self._queue: asyncio.Queue[dict[str, object]] = asyncio.Queue(maxsize=capacity)
        self._tasks: list[asyncio.Task[None]] = []

    async def record(self, involved: bodies.Object, type_: str, reason: str, message: str) -> None:
        """Queue one Event (waits only while the queue is full)."""
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._send(), name=f"events-{i}") for i in range(self.senders)
            ]
        body = event_body(involved, type_, reason, message, dt.datetime.now(dt.UTC))
        await self._queue.put(body)

    async def _send(self) -> None:
        while True:
            body = await self._queue.get()
            try:
                await _post(self.client, body)
            finally:
                self._queue.task_done()

    async def close(self, timeout: float = 10.0) -> None:
        """Send what is queued (for at most `timeout` seconds), then stop the senders."""
        if self._tasks:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue.join(), timeout)
            left = self._queue.qsize()
            if left:
                log.warning("events not recorded at shutdown", extra={"count": left})
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
