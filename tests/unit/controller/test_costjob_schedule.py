"""Every interval the CRD accepts maps to exactly one cron schedule; nothing falls back."""

from __future__ import annotations

import pytest

from finops.api import rules
from finops.controller import costjob_schedule


def _fires_per_day(schedule: str) -> int:
    """Count the minutes of one day a five-field schedule (as we write them) fires on."""
    minute, hour, *_ = schedule.split()

    def expand(field: str, size: int) -> set[int]:
        if field == "*":
            return set(range(size))
        if field.startswith("*/"):
            return set(range(0, size, int(field[2:])))
        return {int(field)}

    return len(expand(minute, 60)) * len(expand(hour, 24))


@pytest.mark.parametrize("seconds", rules.INTERVAL_SECONDS)
def test_every_accepted_interval_fires_evenly_at_its_period(seconds: int) -> None:
    spelled = f"{seconds // 3600}h" if seconds % 3600 == 0 else f"{seconds // 60}m"
    schedule = costjob_schedule.schedule_for(spelled)
    assert _fires_per_day(schedule) == 86400 // seconds


@pytest.mark.parametrize(
    ("interval", "schedule"),
    [
        ("1h", "0 * * * *"),
        ("6h", "0 */6 * * *"),
        ("12h", "0 */12 * * *"),
        ("24h", "0 0 * * *"),
        ("1m", "* * * * *"),
        ("5m", "*/5 * * * *"),
        ("60m", "0 * * * *"),
        ("1440m", "0 0 * * *"),
        ("2h", "0 */2 * * *"),
        ("30m", "*/30 * * * *"),
        ("8h", "0 */8 * * *"),
        ("1h0m0s", "0 * * * *"),
    ],
)
def test_documented_intervals_and_equivalent_spellings(interval: str, schedule: str) -> None:
    assert costjob_schedule.schedule_for(interval) == schedule


@pytest.mark.parametrize("interval", ["7m", "5h", "48h", "90s", "", "1d", "1.5h"])
def test_intervals_no_cron_schedule_can_honour_are_refused_not_defaulted(interval: str) -> None:
    with pytest.raises(costjob_schedule.UnschedulableIntervalError, match="interval"):
        costjob_schedule.schedule_for(interval)
