"""The outcome of a job run, recorded on its CostJob (both job modes write it the same way)."""

from __future__ import annotations

import datetime as dt
import time

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from finops.collection import durations, plan
from finops.kube import resources, status


def finished(at: dt.datetime, started: float, error: str) -> plan.RunRecord:
    """The record of a run that began at `at` (`started` on the monotonic clock)."""
    return plan.RunRecord(
        execution_time=at,
        succeeded=not error,
        duration=durations.format_seconds(dt.timedelta(seconds=time.monotonic() - started)),
        error=error,
    )


async def write(client: AsyncClient, namespace: str, name: str, record: plan.RunRecord) -> str:
    """Prepend `record` to the CostJob's history; '' when written, else why it was not."""
    try:
        done = await status.apply(
            client, resources.CostJob, name, [plan.record_change(record)], namespace=namespace
        )
    except ApiError as exc:
        return f"{exc.status.code} {exc.status.reason}: {exc.status.message}"
    return "" if done.obj is not None else "it is gone"
