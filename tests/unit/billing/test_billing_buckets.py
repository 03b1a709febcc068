"""The three status.costs buckets: windows, current, projected, breakdown."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.oracle import usage as oracle_usage

from finops.api import models
from finops.billing import buckets, fees, money, ticks

UTC = dt.UTC


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


QUICK_START_FEE = fees.FeeSpec.from_fee_block(
    {"period": "1h", "tickAlignment": "ActivatedAt", "priceMicros": 40_000_000}
)

# `status.costs` exactly as the quick start and read-subscription-costs pages print it.
QUICK_START_COSTS = yaml.safe_load(
    """
    - granularity: hour
      start: "2026-04-01T13:00:00Z"
      endExclusive: "2026-04-01T14:00:00Z"
      projected: 40000000
      breakdown:
        - name: subscription
          projected: 40000000
    - granularity: day
      start: "2026-04-01T00:00:00Z"
      endExclusive: "2026-04-02T00:00:00Z"
      current: 160000000
      projected: 600000000
      breakdown:
        - name: subscription
          current: 160000000
          projected: 600000000
    - granularity: month
      start: "2026-04-01T00:00:00Z"
      endExclusive: "2026-05-01T00:00:00Z"
      current: 160000000
      projected: 28440000000
      breakdown:
        - name: subscription
          current: 160000000
          projected: 28440000000
    """
)


class TestQuickStart:
    def test_the_documented_buckets_are_computed_exactly(self) -> None:
        schedule = QUICK_START_FEE.schedule(at("2026-04-01T09:00:00Z"))
        result = buckets.build(at("2026-04-01T13:00:00Z"), schedule)
        assert buckets.to_status(result) == QUICK_START_COSTS

    def test_every_run_inside_the_hour_builds_the_same_buckets(self) -> None:
        schedule = QUICK_START_FEE.schedule(at("2026-04-01T09:00:00Z"))
        assert buckets.build(at("2026-04-01T13:59:59Z"), schedule) == buckets.build(
            at("2026-04-01T13:00:00Z"), schedule
        )

    def test_a_deactivation_cuts_the_projection_back_to_what_will_be_charged(self) -> None:
        schedule = QUICK_START_FEE.schedule(at("2026-04-01T09:00:00Z"), at("2026-04-01T13:42:07Z"))
        hour, day, month = buckets.build(at("2026-04-01T13:00:00Z"), schedule)
        assert hour.projected == 40_000_000
        assert day.projected == month.projected == 200_000_000
        assert day.current == 160_000_000


class TestWindows:
    def test_windows_are_the_scheduled_hour_its_utc_day_and_its_calendar_month(self) -> None:
        got = buckets.windows(at("2028-02-29T13:42:00Z"))
        assert got == [
            (models.Granularity.HOUR, at("2028-02-29T13:00:00Z"), at("2028-02-29T14:00:00Z")),
            (models.Granularity.DAY, at("2028-02-29T00:00:00Z"), at("2028-03-01T00:00:00Z")),
            (models.Granularity.MONTH, at("2028-02-01T00:00:00Z"), at("2028-03-01T00:00:00Z")),
        ]

    def test_december_rolls_into_the_next_year(self) -> None:
        _, _, (_, start, end) = buckets.windows(at("2026-12-31T23:00:00Z"))
        assert (start, end) == (at("2026-12-01T00:00:00Z"), at("2027-01-01T00:00:00Z"))


class TestUsage:
    SCHEDULED = at("2026-04-01T13:00:00Z")

    def charges(self) -> list[buckets.Charge]:
        return [
            buckets.Charge(at("2026-03-31T23:00:00Z"), "cpuHour", 7),  # last month
            buckets.Charge(at("2026-04-01T11:00:00Z"), "cpuHour", 100),
            buckets.Charge(at("2026-04-01T12:00:00Z"), "ramGbHour", 20),
            buckets.Charge(at("2026-04-01T13:00:00Z"), "cpuHour", 5),  # in progress
            buckets.Charge(at("2026-04-01T13:00:00Z"), "networkGb", 0),
        ]

    def test_usage_only_offerings_still_get_buckets(self) -> None:
        hour, day, month = buckets.build(self.SCHEDULED, None, self.charges())
        assert hour.to_status() == {
            "granularity": "hour",
            "start": "2026-04-01T13:00:00Z",
            "endExclusive": "2026-04-01T14:00:00Z",
            "current": 5,
            "breakdown": [{"name": "cpuHour", "current": 5}],
        }
        assert day.current == 125 and day.projected == 0
        assert [m.to_status() for m in day.breakdown] == [
            {"name": "cpuHour", "current": 105},
            {"name": "ramGbHour", "current": 20},
        ]
        assert month.current == 125

    def test_usage_adds_to_current_but_never_to_projected(self) -> None:
        schedule = QUICK_START_FEE.schedule(at("2026-04-01T09:00:00Z"))
        _, day, _ = buckets.build(self.SCHEDULED, schedule, self.charges())
        assert day.current == 160_000_000 + 125
        assert day.projected == 600_000_000
        assert [m.name for m in day.breakdown] == ["subscription", "cpuHour", "ramGbHour"]

    def test_charges_from_the_usage_calculator_can_be_passed_directly(self) -> None:
        charge = oracle_usage.UsageCharge(
            self.SCHEDULED, models.MeterName.GPU_HOUR, Fraction(1), Fraction(9), money.Micros(9), 1
        )
        (hour, _, _) = buckets.build(self.SCHEDULED, None, [charge])
        assert hour.current == 9

    def test_fee_rows_are_refused_to_avoid_counting_the_fee_twice(self) -> None:
        with pytest.raises(ValueError, match="usage charges only"):
            buckets.build(self.SCHEDULED, None, [buckets.Charge(self.SCHEDULED, "subscription", 1)])

    def test_an_all_zero_bucket_shows_only_its_window(self) -> None:
        hour, _, _ = buckets.build(self.SCHEDULED, None, [])
        assert hour.to_status() == {
            "granularity": "hour",
            "start": "2026-04-01T13:00:00Z",
            "endExclusive": "2026-04-01T14:00:00Z",
        }


SPECS = st.builds(
    lambda price, terms: fees.FeeSpec(price, models.TickAlignment(terms[0]), terms[1]),
    st.integers(1, 10**10),
    st.sampled_from(
        [
            ("ActivatedAt", "1h"),
            ("ActivatedAt", "45m"),
            ("ActivatedAt", "24h"),
            ("HourBoundary", "1"),
            ("HourBoundary", "6"),
            ("DayBoundary", "1"),
            ("DayBoundary", "7"),
            ("MonthBoundary", "1"),
        ]
    ),
)
INSTANTS = st.datetimes(
    min_value=dt.datetime(2024, 1, 1), max_value=dt.datetime(2028, 1, 1), timezones=st.just(UTC)
)


@settings(deadline=None)
@given(
    SPECS,
    INSTANTS,
    st.timedeltas(min_value=dt.timedelta(0), max_value=dt.timedelta(days=40)),
    st.one_of(st.none(), st.timedeltas(min_value=dt.timedelta(0), max_value=dt.timedelta(days=40))),
)
def test_bucket_current_is_the_sum_of_the_hourly_fee_rows_and_nothing_is_negative(
    spec: fees.FeeSpec,
    activated: dt.datetime,
    run_after: dt.timedelta,
    life: dt.timedelta | None,
) -> None:
    schedule = spec.schedule(activated, None if life is None else activated + life)
    scheduled = activated + run_after
    anchor = ticks.floor_hour(scheduled)
    for bucket in buckets.build(scheduled, schedule):
        rows = schedule.hourly(bucket.start, min(anchor, bucket.end_exclusive))
        assert bucket.current == sum(micros for _, micros in rows)
        assert bucket.projected == schedule.fee(bucket.start, bucket.end_exclusive)
        assert bucket.current >= 0 and bucket.projected >= bucket.current
        assert all(m.current >= 0 and m.projected >= 0 for m in bucket.breakdown)
