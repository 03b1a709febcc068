"""Which hours an allocation run writes, and how its outcome is recorded on the CostJob.

The scheduled hour is pinned from `SCHEDULED_TIMESTAMP` so a retried Job redoes the same
window; the preceding `HOURS_LOOKBACK` hours get another chance before they are finalized.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from finops.api import bodies

HOUR = dt.timedelta(hours=1)
HISTORY_LIMIT = 10
DEFAULT_LOOKBACK = 2


def truncate_hour(t: dt.datetime) -> dt.datetime:
    """The start of the UTC hour containing `t` (which must be timezone-aware)."""
    if t.tzinfo is None:
        raise ValueError("naive datetime: times are timezone-aware UTC")
    return t.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)


def scheduled_hour(value: str | None, now: dt.datetime) -> dt.datetime:
    """Pin the hour from an RFC3339 timestamp; empty or unparsable falls back to `now`'s hour."""
    if value:
        try:
            parsed = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            return truncate_hour(parsed)
    return truncate_hour(now)


def lookback_hours(value: str | None) -> int:
    """`HOURS_LOOKBACK`: absent → 2; a non-negative integer otherwise (bad text → default)."""
    if value is None or not value.strip():
        return DEFAULT_LOOKBACK
    try:
        n = int(value.strip())
    except ValueError:
        return DEFAULT_LOOKBACK
    return n if n >= 0 else DEFAULT_LOOKBACK


@dataclasses.dataclass(frozen=True, slots=True)
class HourWork:
    """One hour to fetch and write, and whether its rows are written finalized."""

    start: dt.datetime
    finalized: bool


def hours_to_collect(
    scheduled: dt.datetime, lookback: int, fully_finalized: Collection[dt.datetime]
) -> list[HourWork]:
    """Oldest first: lookback hours not yet fully finalized (written final), then the scheduled
    hour itself (written not final, since it is still in progress)."""
    work = [
        HourWork(scheduled - HOUR * k, True)
        for k in range(lookback, 0, -1)
        if scheduled - HOUR * k not in fully_finalized
    ]
    work.append(HourWork(scheduled, False))
    return work


def rfc3339(t: dt.datetime) -> str:
    """Kubernetes' time format: seconds precision, `Z`."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True, slots=True)
class RunRecord:
    """One run's outcome as written to `status.executionHistory`."""

    execution_time: dt.datetime
    succeeded: bool
    duration: str
    error: str = ""

    def to_status(self) -> bodies.ExecutionRecordBody:
        """The API shape (`executionTime`, `status`, `duration`, `error` when failed)."""
        out: bodies.ExecutionRecordBody = {
            "executionTime": rfc3339(self.execution_time),
            "status": "Success" if self.succeeded else "Failed",
            "duration": self.duration,
        }
        if self.error:
            out["error"] = self.error
        return out


def status_after_run(
    status: bodies.CostJobStatusBody | None, record: RunRecord
) -> bodies.CostJobStatusBody:
    """The CostJob status fields a run writes: the record prepended (newest first, at most ten),
    the last-execution fields, and the last success time only when this run succeeded."""
    history: Sequence[bodies.ExecutionRecordBody] = (status or {}).get("executionHistory") or []
    entry = record.to_status()
    out: bodies.CostJobStatusBody = {
        "executionHistory": [entry, *history][:HISTORY_LIMIT],
        "lastExecutionTime": entry["executionTime"],
        "lastExecutionStatus": entry["status"],
    }
    if record.succeeded:
        out["lastSuccessfulExecutionTime"] = entry["executionTime"]
    return out


def record_change(record: RunRecord) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A status change for the CostJob object as read: its status with this run recorded."""

    def change(costjob: Mapping[str, Any]) -> dict[str, Any]:
        current: bodies.CostJobStatusBody = costjob.get("status") or bodies.CostJobStatusBody()
        return {**current, **status_after_run(current, record)}

    return change
