"""Every interval the CRD accepts maps to exactly one cron schedule; nothing falls back."""

from __future__ import annotations

import pytest

from finops.api import rules
from finops.provisioning import costjobs


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
    schedule = costjobs.schedule_for(spelled)
    assert _fires_per_day(schedule) == 86400 // seconds


def test_schedule_for_is_the_contracts_mapping() -> None:
    """The table itself is tested once, on `rules.interval_schedule` (tests/unit/api)."""
    for interval in ("1h", "6h", "1440m", "30m", "1h0m0s"):
        assert costjobs.schedule_for(interval) == rules.interval_schedule(interval)


@pytest.mark.parametrize("interval", ["7m", "5h", "48h", "90s", "", "1d", "1.5h"])
def test_intervals_no_cron_schedule_can_honour_are_refused_not_defaulted(interval: str) -> None:
    with pytest.raises(costjobs.UnschedulableIntervalError, match="interval"):
        costjobs.schedule_for(interval)
