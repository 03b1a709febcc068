"""The subscription fee: the worked examples of the docs, and the properties that make it
safe to recompute any window at any time."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finops.api import models
from finops.billing import fees, ticks

UTC = dt.UTC
HOUR = dt.timedelta(hours=1)


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def fee_spec(
    price: int, alignment: str, period: str, min_periods: int | None = None
) -> fees.FeeSpec:
    block: dict[str, object] = {"priceMicros": price, "tickAlignment": alignment, "period": period}
    if min_periods is not None:
        block["minPeriods"] = min_periods
    return fees.FeeSpec.from_fee_block(block)


QUICK_START = {"period": "1h", "tickAlignment": "ActivatedAt", "priceMicros": 40_000_000}


class TestWorkedExamples:
    def test_hourly_opening_tick_is_prorated_into_the_window_it_closes(self) -> None:
        schedule = fee_spec(40_000_000, "HourBoundary", "1").schedule(at("2026-08-12T09:15:00Z"))
        assert schedule.clock.opening_seconds() == 2_700
        assert schedule.clock.nominal_period_seconds() == 3_600
        assert schedule.fee(at("2026-08-12T09:00:00Z"), at("2026-08-12T10:00:00Z")) == 30_000_000
        assert schedule.fee(at("2026-08-12T10:00:00Z"), at("2026-08-12T11:00:00Z")) == 40_000_000
        assert schedule.fee(at("2026-08-12T11:00:00Z"), at("2026-08-12T17:00:00Z")) == 240_000_000

    def test_monthly_opening_tick_lands_in_the_last_hour_of_august(self) -> None:
        schedule = fee_spec(300_000_000, "MonthBoundary", "1").schedule(at("2026-08-12T09:15:00Z"))
        assert schedule.clock.first_boundary() == at("2026-09-01T00:00:00Z")
        assert schedule.clock.opening_seconds() == 1_694_700
        assert schedule.clock.nominal_period_seconds() == 2_629_800
        hours = dict(schedule.hourly(at("2026-08-31T21:00:00Z"), at("2026-09-01T03:00:00Z")))
        assert hours[at("2026-08-31T23:00:00Z")] == 193_326_488
        assert sum(hours.values()) == 193_326_488
        assert hours[at("2026-09-01T00:00:00Z")] == 0

    def test_quick_start_deactivation_charges_five_whole_ticks(self) -> None:
        schedule = fees.FeeSpec.from_fee_block(QUICK_START).schedule(
            at("2026-04-01T09:00:00Z"), at("2026-04-01T13:42:07Z")
        )
        assert schedule.end == at("2026-04-01T14:00:00Z")
        assert schedule.deactivated_at == at("2026-04-01T13:42:07Z")
        assert schedule.billed_ticks(at("2026-04-30T00:00:00Z")) == 5
        assert schedule.fee(at("2026-04-01T00:00:00Z"), at("2026-05-01T00:00:00Z")) == 200_000_000
        assert schedule.fee(at("2026-04-01T14:00:00Z"), at("2026-04-02T00:00:00Z")) == 0

    def test_day_boundary_week_opening_tick_is_two_hours_of_a_week(self) -> None:
        schedule = fee_spec(168_000_000, "DayBoundary", "7").schedule(at("2026-04-01T22:00:00Z"))
        assert schedule.opening_tick_micros == 2_000_000  # 2 of 168 hours

    def test_activated_at_never_prorates(self) -> None:
        schedule = fee_spec(40_000_000, "ActivatedAt", "1h").schedule(at("2026-04-01T09:15:00Z"))
        assert schedule.fee(at("2026-04-01T10:00:00Z"), at("2026-04-01T11:00:00Z")) == 40_000_000

    def test_sub_second_activation_precision_is_discarded_from_proration(self) -> None:
        schedule = fee_spec(40_000_000, "HourBoundary", "1").schedule(
            at("2026-08-12T09:15:00.999999Z")
        )
        assert schedule.opening_tick_micros == 30_000_000

    def test_proration_rounds_down_to_a_whole_micro(self) -> None:
        # 7 micros × 2700 s / 3600 s = 5.25 -> 5
        schedule = fee_spec(7, "HourBoundary", "1").schedule(at("2026-08-12T09:15:00Z"))
        assert schedule.opening_tick_micros == 5

    def test_a_long_period_bills_its_closing_tick_in_the_hour_of_the_snapped_boundary(self) -> None:
        schedule = fee_spec(24_000_000, "ActivatedAt", "24h").schedule(
            at("2026-04-01T09:15:00Z"), at("2026-04-04T12:00:00Z")
        )
        assert schedule.end == at("2026-04-05T09:15:00Z")
        assert schedule.last_billable_hour() == at("2026-04-05T09:00:00Z")
        assert schedule.fee(at("2026-04-05T09:00:00Z"), at("2026-04-05T10:00:00Z")) == 24_000_000


class TestMinPeriods:
    def test_the_guard_counts_boundaries_since_activation_not_wall_clock_since_delete(self) -> None:
        schedule = fee_spec(1_000_000, "HourBoundary", "1", min_periods=24).schedule(
            at("2026-04-01T09:15:00Z"), at("2026-04-01T12:00:00Z")
        )
        assert not schedule.min_periods_elapsed(at("2026-04-02T08:00:00Z"))  # 23 boundaries
        assert schedule.min_periods_elapsed(at("2026-04-02T09:00:00Z"))  # 24 boundaries

    def test_waiting_for_the_guard_adds_no_shortfall(self) -> None:
        schedule = fee_spec(1_000_000, "HourBoundary", "1", min_periods=24).schedule(
            at("2026-04-01T09:15:00Z"), at("2026-04-01T12:00:00Z")
        )
        assert schedule.fee(at("2026-04-01T12:00:00Z"), at("2026-04-03T00:00:00Z")) == 0

    def test_no_min_periods_never_holds(self) -> None:
        schedule = fee_spec(1, "ActivatedAt", "1h").schedule(at("2026-04-01T09:00:00Z"))
        assert schedule.min_periods_elapsed(at("2026-04-01T09:00:00Z"))


class TestReadingTheFeeBlock:
    def test_an_offering_without_a_fee_has_none(self) -> None:
        assert fees.FeeSpec.from_offering_spec({"pricing": {"resourcePricing": []}}) is None
        assert fees.FeeSpec.from_offering_spec({"pricing": {}}) is None

    def test_the_fee_block_is_read_from_an_offering_spec(self) -> None:
        spec = fees.FeeSpec.from_offering_spec({"pricing": {"subscriptionFee": QUICK_START}})
        assert spec == fees.FeeSpec(40_000_000, models.TickAlignment.ACTIVATED_AT, "1h")
        assert fees.FeeSpec(40_000_000, "ActivatedAt", "1h") == spec  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        ("block", "message"),
        [
            ({"tickAlignment": "ActivatedAt", "period": "1h"}, "priceMicros is required"),
            ({**QUICK_START, "priceMicros": 0}, "priceMicros must be >= 1"),
            ({**QUICK_START, "priceMicros": "40"}, "priceMicros must be an integer"),
            ({**QUICK_START, "priceMicros": True}, "priceMicros must be an integer"),
            ({**QUICK_START, "tickAlignment": "Weekly"}, "tickAlignment must be one of"),
            ({**QUICK_START, "period": "1"}, "period must be a Go duration"),
            ({**QUICK_START, "period": 1}, "period must be a string"),
            ({**QUICK_START, "minPeriods": 0}, "minPeriods must be >= 1"),
        ],
    )
    def test_unbillable_blocks_are_refused_clearly(
        self, block: dict[str, object], message: str
    ) -> None:
        with pytest.raises(fees.FeeSpecError, match=message):
            fees.FeeSpec.from_fee_block(block)

    def test_a_window_that_ends_before_it_starts_is_refused(self) -> None:
        schedule = fees.FeeSpec.from_fee_block(QUICK_START).schedule(at("2026-04-01T09:00:00Z"))
        with pytest.raises(ValueError, match="before it starts"):
            schedule.fee(at("2026-04-01T12:00:00Z"), at("2026-04-01T11:00:00Z"))

    def test_hourly_windows_must_be_whole_hours(self) -> None:
        schedule = fees.FeeSpec.from_fee_block(QUICK_START).schedule(at("2026-04-01T09:00:00Z"))
        with pytest.raises(ValueError, match="whole UTC hours"):
            schedule.hourly(at("2026-04-01T09:30:00Z"), at("2026-04-01T11:00:00Z"))


# ---------------------------------------------------------------- properties

SPECS = st.builds(
    lambda price, terms: fees.FeeSpec(price, models.TickAlignment(terms[0]), terms[1]),
    st.integers(1, 10**12),
    st.one_of(
        st.tuples(st.just("ActivatedAt"), st.integers(1, 7200).map(lambda n: f"{n}s")),
        st.tuples(st.just("ActivatedAt"), st.integers(1, 600).map(lambda n: f"{n}m")),
        st.tuples(st.just("ActivatedAt"), st.integers(1, 72).map(lambda n: f"{n}h")),
        st.tuples(st.just("HourBoundary"), st.integers(1, 30).map(str)),
        st.tuples(st.just("DayBoundary"), st.integers(1, 10).map(str)),
        st.tuples(st.just("MonthBoundary"), st.integers(1, 3).map(str)),
    ),
)
ACTIVATIONS = st.datetimes(
    min_value=dt.datetime(2020, 1, 1), max_value=dt.datetime(2030, 1, 1), timezones=st.just(UTC)
)
OFFSETS = st.timedeltas(min_value=dt.timedelta(0), max_value=dt.timedelta(days=120))
LIFETIMES = st.one_of(st.none(), OFFSETS)


def schedule_of(
    spec: fees.FeeSpec, activated: dt.datetime, life: dt.timedelta | None
) -> fees.FeeSchedule:
    return spec.schedule(activated, None if life is None else activated + life)


@settings(deadline=None)
@given(
    SPECS,
    ACTIVATIONS,
    LIFETIMES,
    st.lists(
        st.timedeltas(min_value=-dt.timedelta(days=10), max_value=dt.timedelta(days=150)),
        min_size=2,
        max_size=12,
    ),
)
def test_fee_is_additive_over_any_partition_of_a_window(
    spec: fees.FeeSpec,
    activated: dt.datetime,
    life: dt.timedelta | None,
    cuts: list[dt.timedelta],
) -> None:
    schedule = schedule_of(spec, activated, life)
    points = sorted(activated + cut for cut in cuts)
    parts = [schedule.fee(a, b) for a, b in itertools.pairwise(points)]
    assert sum(parts) == schedule.fee(points[0], points[-1])


@settings(deadline=None)
@given(SPECS, ACTIVATIONS, LIFETIMES, OFFSETS, OFFSETS, st.integers(-12, 12))
def test_recomputing_a_window_gives_the_same_fee(
    spec: fees.FeeSpec,
    activated: dt.datetime,
    life: dt.timedelta | None,
    a: dt.timedelta,
    b: dt.timedelta,
    zone_hours: int,
) -> None:
    start, end = sorted((activated + a, activated + b))
    first = schedule_of(spec, activated, life).fee(start, end)
    # Rebuilt from scratch, from the same instants written in another time zone.
    zone = dt.timezone(dt.timedelta(hours=zone_hours))
    again = fees.FeeSpec.from_fee_block(
        {
            "priceMicros": spec.price_micros,
            "tickAlignment": spec.tick_alignment.value,
            "period": spec.period,
        }
    ).schedule(
        activated.astimezone(zone), None if life is None else (activated + life).astimezone(zone)
    )
    assert again.fee(start.astimezone(zone), end.astimezone(zone)) == first


def boundaries_up_to(clock: ticks.TickClock, t: dt.datetime) -> int:
    """How many boundaries are <= t, found by searching `boundary(n)` (not `count`)."""
    low, high = 0, 1
    while clock.boundary(high) <= t:
        low, high = high, high * 2
    while high - low > 1:  # boundary(low) <= t < boundary(high), boundary(0) read as -inf
        middle = (low + high) // 2
        if clock.boundary(middle) <= t:
            low = middle
        else:
            high = middle
    return low


@settings(deadline=None, max_examples=60)
@given(SPECS, ACTIVATIONS, OFFSETS)
def test_a_subscription_total_over_its_life_equals_the_sum_of_its_hourly_charges(
    spec: fees.FeeSpec, activated: dt.datetime, life: dt.timedelta
) -> None:
    schedule = schedule_of(spec, activated, life)
    assert schedule.end is not None
    first_hour = ticks.floor_hour(activated)
    after_end = ticks.floor_hour(schedule.end) + 2 * HOUR
    hourly = schedule.hourly(first_hour, after_end)
    total = sum(micros for _, micros in hourly)
    # Independently: every boundary up to the snapped end is one tick, the first prorated.
    n = boundaries_up_to(schedule.clock, schedule.end)
    assert n >= 1
    assert total == schedule.opening_tick_micros + (n - 1) * spec.price_micros
    assert total == schedule.fee(activated - HOUR, schedule.end + 1000 * HOUR)
    last = schedule.last_billable_hour()
    assert last is not None
    assert all(micros == 0 for hour, micros in hourly if hour > last)


@settings(deadline=None)
@given(SPECS, ACTIVATIONS, LIFETIMES, OFFSETS, OFFSETS)
def test_no_fee_is_ever_negative(
    spec: fees.FeeSpec,
    activated: dt.datetime,
    life: dt.timedelta | None,
    a: dt.timedelta,
    b: dt.timedelta,
) -> None:
    schedule = schedule_of(spec, activated, life)
    start, end = sorted((activated + a - dt.timedelta(days=2), activated + b))
    assert schedule.opening_tick_micros >= 0
    assert schedule.fee(start, end) >= 0
    hour = ticks.floor_hour(start)
    for _, micros in schedule.hourly(hour, hour + 6 * HOUR):
        assert micros >= 0


@settings(deadline=None)
@given(SPECS, ACTIVATIONS, OFFSETS)
def test_the_snap_never_charges_a_partial_final_tick(
    spec: fees.FeeSpec, activated: dt.datetime, life: dt.timedelta
) -> None:
    deactivated = activated + life
    ended = spec.schedule(activated, deactivated)
    running = spec.schedule(activated)
    assert ended.end is not None and ended.end >= deactivated
    # Everything charged is a whole number of ticks after the opening one...
    total = ended.accrued(ended.end + dt.timedelta(days=400))
    assert total >= ended.opening_tick_micros
    assert (total - ended.opening_tick_micros) % spec.price_micros == 0
    # ...and exactly what a running Subscription had accrued at the snapped boundary.
    assert total == running.accrued(ended.end)
    # A deactivation already on a boundary stays there.
    assert spec.schedule(activated, ended.end).end == ended.end


def window(
    activated: dt.datetime, offset: dt.timedelta, hours: int
) -> tuple[dt.datetime, dt.datetime]:
    """`hours` whole hours from `offset` after the hour a day before activation."""
    start = ticks.floor_hour(activated + offset - dt.timedelta(days=1))
    return start, start + hours * HOUR


@settings(deadline=None)
@given(SPECS, ACTIVATIONS, LIFETIMES, OFFSETS, st.integers(0, 60))
def test_hourly_spans_are_the_hourly_fee_with_the_ticks_and_service_of_each_hour(
    spec: fees.FeeSpec,
    activated: dt.datetime,
    life: dt.timedelta | None,
    offset: dt.timedelta,
    hours: int,
) -> None:
    """The charge run's fee rows (`hourly_spans`, counted in one batch) against `hourly`,
    `billed_ticks` and `covered` hour by hour, over windows before, across and after the
    deactivation."""
    schedule = schedule_of(spec, activated, life)
    start, end = window(activated, offset, hours)
    expected = []
    for hour, micros in schedule.hourly(start, end):
        before, after = schedule.billed_ticks(hour), schedule.billed_ticks(hour + HOUR)
        expected.append((hour, after - before, micros, schedule.covered(before, after)))
    assert schedule.hourly_spans(start, end) == expected


EVEN_SPECS = st.builds(
    lambda price, terms: fees.FeeSpec(price, models.TickAlignment(terms[0]), terms[1]),
    st.integers(1, 10**12),
    st.one_of(
        st.sampled_from([d for d in range(1, 3601) if 3600 % d == 0]).map(
            lambda n: ("ActivatedAt", f"{n}s")
        ),
        st.sampled_from(["1h", "60m", "30m", "20m", "15m", "1m"]).map(lambda p: ("ActivatedAt", p)),
        st.just(("HourBoundary", "1")),
    ),
)
"""Clocks that close the same ticks every hour: the runs `hourly_runs` works out whole."""


LIVES = st.tuples(ACTIVATIONS, LIFETIMES, OFFSETS, st.integers(0, 80))
"""(activation, lifetime, where the window starts after a day before activation, its hours)."""


@settings(deadline=None, max_examples=300)
@given(st.one_of(EVEN_SPECS, SPECS), LIVES)
def test_hourly_runs_stand_for_exactly_the_hourly_spans(
    spec: fees.FeeSpec, life: tuple[dt.datetime, dt.timedelta | None, dt.timedelta, int]
) -> None:
    """The fee rows a charge run writes, as runs: expanded they are `hourly_spans` row for
    row, over windows before, across and after activation and the deactivation, and no two
    neighbouring runs could have been one."""
    activated, lifetime, offset, hours = life
    schedule = schedule_of(spec, activated, lifetime)
    start, end = window(activated, offset, hours)
    runs = schedule.hourly_runs(start, end)
    assert fees.expand(runs) == schedule.hourly_spans(start, end)
    assert fees.fold(runs) == runs
    assert all(n >= 1 for _, n, *_ in runs)


@pytest.mark.parametrize(("alignment", "period"), [("ActivatedAt", "15m"), ("HourBoundary", "1")])
def test_a_clock_even_by_the_hour_gives_a_few_runs_however_long_the_window(
    alignment: str, period: str
) -> None:
    """An hourly fee over ten weeks is the opening hours, one run, and the closing hours: the
    run's cost does not grow with the hours it covers."""
    spec = fees.FeeSpec(1_000_000, models.TickAlignment(alignment), period)
    activated = dt.datetime(2026, 1, 30, 21, 17, 5, tzinfo=dt.UTC)
    schedule = spec.schedule(activated, activated + dt.timedelta(days=60, minutes=7))
    start = dt.datetime(2026, 1, 30, 20, tzinfo=dt.UTC)
    end = start + dt.timedelta(days=70)
    runs = schedule.hourly_runs(start, end)
    assert fees.expand(runs) == schedule.hourly_spans(start, end)
    assert len(runs) <= 6
    assert max(n for _, n, *_ in runs) >= 60 * 24 - 2


@pytest.mark.parametrize(
    ("alignment", "period"),
    [("ActivatedAt", "90m"), ("ActivatedAt", "1h"), ("HourBoundary", "2"),
     ("DayBoundary", "1"), ("MonthBoundary", "1")],
)  # fmt: skip
def test_hourly_spans_name_the_service_each_hours_ticks_pay_for(
    alignment: str, period: str
) -> None:
    """Each fee row's span runs from the boundary before its ticks (activation for the
    opening one) to its last boundary, and the batch form agrees with `covered` hour by hour."""
    spec = fees.FeeSpec(1_000_000, models.TickAlignment(alignment), period)
    activated = dt.datetime(2026, 1, 30, 21, 17, tzinfo=dt.UTC)
    schedule = spec.schedule(activated, activated + dt.timedelta(days=40))
    start = dt.datetime(2026, 1, 30, 21, tzinfo=dt.UTC)
    end = start + dt.timedelta(days=45)
    spans = schedule.hourly_spans(start, end)
    for hour, closed, _, span in spans:
        before = schedule.billed_ticks(hour)
        assert span == schedule.covered(before, before + closed)
        if span is not None:
            assert span[0] < span[1] and hour < span[1] <= hour + ticks.HOUR
    assert next(s for *_, s in spans if s is not None)[0] == activated
