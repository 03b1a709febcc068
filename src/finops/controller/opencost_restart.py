"""Restart OpenCost by bumping a pod-template annotation on its Deployment.

OpenCost reads its pricing document and provider settings only at start, so a real change
must be followed by exactly one restart, and a no-op by none. Callers decide; this writes.
"""

from __future__ import annotations

import datetime as dt
import logging

import lightkube
from lightkube.resources import apps_v1

from finops.api import conditions
from finops.controller import config, metrics
from finops.kube import client as kube_client
from finops.pricing import opencost_document

log = logging.getLogger(__name__)


def restart_patch(now: dt.datetime) -> dict[str, object]:
    """The merge patch that makes the Deployment roll its pods."""
    return {
        "spec": {
            "template": {
                "metadata": {
                    "annotations": {
                        opencost_document.RESTARTED_AT_ANNOTATION: conditions.rfc3339(now)
                    }
                }
            }
        }
    }


async def restart(
    client: lightkube.AsyncClient, settings: config.ControllerSettings, cause: str
) -> bool:
    """Patch the OpenCost Deployment; False (logged) when it does not exist."""
    where = f"{settings.opencost_namespace}/{settings.opencost_deployment_name}"
    try:
        await kube_client.merge_patch(
            client,
            apps_v1.Deployment,
            settings.opencost_deployment_name,
            restart_patch(dt.datetime.now(dt.UTC)),
            namespace=settings.opencost_namespace,
        )
    except lightkube.ApiError as exc:
        if kube_client.status_code(exc) == 404:
            log.warning(
                "OpenCost deployment not found; nothing to restart",
                extra={"deployment": where},
            )
            return False
        raise
    metrics.OPENCOST_RESTARTS.labels(cause=cause).inc()
    log.info(
        "restarted OpenCost",
        extra={
            "deployment": where,
            "cause": cause,
        },
    )
    return True
