"""Tick boundaries for each alignment, the half-open counter, and the deactivation snap."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finops.api import models
from finops.billing import ticks

UTC = dt.UTC


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def clock(alignment: str, period: str, activated: str) -> ticks.TickClock:
    return ticks.TickClock.create(alignment, period, at(activated))


class TestPeriods:
    @pytest.mark.parametrize(("period", "seconds"), [("1h", 3600), ("90m", 5400), ("3600s", 3600)])
    def test_activated_at_takes_a_single_unit_duration(self, period: str, seconds: int) -> None:
        assert ticks.parse_period(models.TickAlignment.ACTIVATED_AT, period) == seconds

    @pytest.mark.parametrize("period", ["1h30m", "1", "1d", "h", "-1h", "1.5h"])
    def test_activated_at_refuses_other_shapes_with_the_crd_message(self, period: str) -> None:
        with pytest.raises(ticks.PeriodError, match="period must be a Go duration"):
            ticks.parse_period(models.TickAlignment.ACTIVATED_AT, period)

    @pytest.mark.parametrize(
        "alignment",
        [
            models.TickAlignment.HOUR_BOUNDARY,
            models.TickAlignment.DAY_BOUNDARY,
            models.TickAlignment.MONTH_BOUNDARY,
        ],
    )
    def test_boundary_alignments_take_a_plain_integer(
        self, alignment: models.TickAlignment
    ) -> None:
        assert ticks.parse_period(alignment, "7") == 7
        with pytest.raises(ticks.PeriodError, match="plain integer"):
            ticks.parse_period(alignment, "1h")

    def test_a_zero_period_is_refused(self) -> None:
        with pytest.raises(ticks.PeriodError, match="zero"):
            ticks.parse_period(models.TickAlignment.HOUR_BOUNDARY, "0")

    def test_an_unknown_alignment_is_refused(self) -> None:
        with pytest.raises(ticks.PeriodError, match="WeekBoundary"):
            clock("WeekBoundary", "1", "2026-04-01T09:00:00Z")

    def test_naive_times_are_refused(self) -> None:
        with pytest.raises(ValueError, match="timezone"):
            ticks.TickClock.create("ActivatedAt", "1h", dt.datetime(2026, 4, 1, 9))


class TestWhereBoundariesFall:
    def test_activated_at_ticks_every_period_after_activation(self) -> None:
        c = clock("ActivatedAt", "90m", "2026-04-01T09:07:00Z")
        assert [c.boundary(n) for n in (1, 2)] == [
            at("2026-04-01T10:37:00Z"),
            at("2026-04-01T12:07:00Z"),
        ]

    def test_hour_boundary_two_gives_even_hours_utc(self) -> None:
        c = clock("HourBoundary", "2", "2026-04-01T09:15:00Z")
        assert [c.boundary(n).hour for n in (1, 2, 3)] == [10, 12, 14]

    def test_hour_boundary_six_gives_the_four_quarter_days(self) -> None:
        c = clock("HourBoundary", "6", "2026-04-01T01:00:00Z")
        assert [c.boundary(n).hour for n in range(1, 5)] == [6, 12, 18, 0]

    def test_day_boundary_starts_at_the_next_midnight_then_steps_period_days(self) -> None:
        c = clock("DayBoundary", "7", "2026-04-01T22:00:00Z")
        assert c.boundary(1) == at("2026-04-02T00:00:00Z")
        assert c.boundary(2) == at("2026-04-09T00:00:00Z")

    def test_month_boundary_counts_period_months_from_the_activation_month(self) -> None:
        c = clock("MonthBoundary", "3", "2026-08-12T09:15:00Z")
        assert c.boundary(1) == at("2026-11-01T00:00:00Z")
        assert c.boundary(2) == at("2027-02-01T00:00:00Z")

    def test_an_activation_exactly_on_the_grid_waits_a_full_period(self) -> None:
        c = clock("HourBoundary", "1", "2026-04-01T10:00:00Z")
        assert c.first_boundary() == at("2026-04-01T11:00:00Z")


class TestCounting:
    def test_a_boundary_at_activation_is_excluded_and_one_at_t_is_included(self) -> None:
        c = clock("ActivatedAt", "1h", "2026-04-01T09:00:00Z")
        assert c.count(at("2026-04-01T09:00:00Z")) == 0
        assert c.count(at("2026-04-01T09:59:59Z")) == 0
        assert c.count(at("2026-04-01T10:00:00Z")) == 1
        assert c.count(at("2026-04-01T14:00:00Z")) == 5

    def test_times_before_activation_count_nothing(self) -> None:
        c = clock("MonthBoundary", "1", "2026-08-12T09:15:00Z")
        assert c.count(at("2026-01-01T00:00:00Z")) == 0

    def test_the_same_instant_in_another_zone_counts_the_same(self) -> None:
        c = clock("DayBoundary", "1", "2026-04-01T09:00:00Z")
        assert c.count(at("2026-04-03T02:00:00+02:00")) == c.count(at("2026-04-03T00:00:00Z")) == 2


class TestSnap:
    def test_an_hourly_deactivation_snaps_to_the_next_hour(self) -> None:
        c = clock("HourBoundary", "1", "2026-04-01T08:00:00Z")
        assert c.snap(at("2026-04-01T09:40:00Z")) == at("2026-04-01T10:00:00Z")

    def test_a_deactivation_on_a_boundary_is_not_moved(self) -> None:
        c = clock("HourBoundary", "1", "2026-04-01T08:00:00Z")
        assert c.snap(at("2026-04-01T10:00:00Z")) == at("2026-04-01T10:00:00Z")

    def test_a_daily_activated_at_period_snaps_to_the_activation_time_of_day(self) -> None:
        c = clock("ActivatedAt", "24h", "2026-04-01T09:15:00Z")
        assert c.snap(at("2026-04-04T12:00:00Z")) == at("2026-04-05T09:15:00Z")


ALIGNED_PERIODS = st.one_of(
    st.tuples(st.just("ActivatedAt"), st.integers(1, 5000).map(lambda n: f"{n}s")),
    st.tuples(st.just("ActivatedAt"), st.integers(1, 3000).map(lambda n: f"{n}m")),
    st.tuples(st.just("ActivatedAt"), st.integers(1, 800).map(lambda n: f"{n}h")),
    st.tuples(st.just("HourBoundary"), st.integers(1, 48).map(str)),
    st.tuples(st.just("DayBoundary"), st.integers(1, 30).map(str)),
    st.tuples(st.just("MonthBoundary"), st.integers(1, 12).map(str)),
)
INSTANTS = st.datetimes(
    min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2060, 1, 1), timezones=st.just(UTC)
)


@settings(deadline=None)
@given(ALIGNED_PERIODS, INSTANTS, st.integers(1, 40))
def test_the_nth_boundary_is_where_the_count_reaches_n(
    terms: tuple[str, str], activated: dt.datetime, n: int
) -> None:
    c = ticks.TickClock.create(terms[0], terms[1], activated)
    b = c.boundary(n)
    assert b > activated
    assert c.count(b) == n
    assert c.count(b - dt.timedelta(microseconds=1)) == n - 1


@settings(deadline=None)
@given(
    ALIGNED_PERIODS,
    INSTANTS,
    st.timedeltas(min_value=dt.timedelta(0), max_value=dt.timedelta(days=900)),
)
def test_the_snap_is_the_first_boundary_at_or_after_the_instant(
    terms: tuple[str, str], activated: dt.datetime, offset: dt.timedelta
) -> None:
    c = ticks.TickClock.create(terms[0], terms[1], activated)
    t = activated + offset
    snapped = c.snap(t)
    assert snapped >= t
    n = c.count(snapped)
    assert n >= 1 and c.boundary(n) == snapped
    # No boundary lies in [t, snapped): the previous one is before t.
    assert n == 1 or c.boundary(n - 1) < t


@settings(deadline=None)
@given(
    ALIGNED_PERIODS,
    INSTANTS,
    st.lists(
        st.tuples(
            st.timedeltas(min_value=-dt.timedelta(days=40), max_value=dt.timedelta(days=900)),
            st.integers(-12, 12),
        ),
        max_size=30,
    ),
)
def test_counts_is_count_of_each_instant(
    terms: tuple[str, str], activated: dt.datetime, offsets: list[tuple[dt.timedelta, int]]
) -> None:
    """The batched count a fee's hourly rows use, against `count` one instant at a time
    (instants before activation, on boundaries, written in other zones)."""
    c = ticks.TickClock.create(terms[0], terms[1], activated)
    times = [(activated + o).astimezone(dt.timezone(dt.timedelta(hours=z))) for o, z in offsets]
    times += [c.boundary(n) for n in (1, 2, 3)] + [activated]
    assert c.counts(times) == [c.count(t) for t in times]


def test_a_naive_datetime_is_refused_by_its_name() -> None:
    aware = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    berlin = dt.datetime(2026, 3, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    ticks.require_aware(start=aware, end=berlin)
    with pytest.raises(ValueError, match=r"^end must be timezone-aware, got datetime\.datetime"):
        ticks.require_aware(start=aware, end=dt.datetime(2026, 3, 2))
