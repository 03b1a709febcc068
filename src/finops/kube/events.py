"""Kubernetes Events on the transitions users care about.

Events are best effort: a failure to record one is logged and never fails a reconcile.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

import lightkube

from finops.api import conditions
from finops.kube import client as kube_client

COMPONENT = "finops-operator"
NORMAL = "Normal"
WARNING = "Warning"

log = logging.getLogger(__name__)


def event_body(
    involved: Mapping[str, Any], type_: str, reason: str, message: str, now: dt.datetime
) -> dict[str, Any]:
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
    involved: Mapping[str, Any],
    type_: str,
    reason: str,
    message: str,
) -> None:
    """Post one Event; swallow and log API errors."""
    body = event_body(involved, type_, reason, message, dt.datetime.now(dt.UTC))
    try:
        await kube_client.create(client, kube_client.Event, body)
    except Exception as exc:  # best effort by design
        log.warning("could not record event", extra={"reason": reason, "error": str(exc)})
