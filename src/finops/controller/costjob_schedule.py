"""CostJob `spec.interval` -> CronJob schedule.

The CRD's CEL rule (finops.api.rules) admits exactly the intervals a cron schedule can
honour; this maps every one of them and refuses the rest loudly instead of silently
falling back to daily (DESIGN §2.2). One table, shared with the rule, so they cannot drift.
"""

from __future__ import annotations

from finops.api import rules


class UnschedulableIntervalError(ValueError):
    """An interval no cron schedule can express (only reachable if admission was bypassed)."""


def schedule_for(interval: str) -> str:
    """The cron schedule for an accepted interval; raises for anything else."""
    schedule = rules.interval_schedule(interval)
    if schedule is None:
        raise UnschedulableIntervalError(f"spec.interval {interval!r}: {rules.INTERVAL_MESSAGE}")
    return schedule
