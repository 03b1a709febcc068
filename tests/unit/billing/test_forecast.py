"""The budget forecast: future fees exact against a literal reading of the billing model, and
the usage estimate as documented (a week's rate per active hour, extrapolated)."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.oracle import fee_ticks

from finops.billing import fees, forecast, money, usage

UTC = dt.UTC
HOUR = dt.timedelta(hours=1)
MONTH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))

ALIGNMENTS = st.sampled_from(
    [
        ("ActivatedAt", "1h"),
        ("ActivatedAt", "90m"),
        ("ActivatedAt", "7200s"),
        ("HourBoundary", "1"),
        ("HourBoundary", "5"),
        ("DayBoundary", "1"),
        ("DayBoundary", "7"),
        ("MonthBoundary", "1"),
        ("MonthBoundary", "2"),
    ]
)
# Seconds from 20 days before the month to its end: activation may precede the period.
INSTANTS = st.integers(min_value=-20 * 86400, max_value=31 * 86400 - 1)


def at(seconds: int) -> dt.datetime:
    return MONTH[0] + dt.timedelta(seconds=seconds)


def schedule(
    price: int, alignment: tuple[str, str], activated: dt.datetime, deactivated: dt.datetime | None
) -> fees.FeeSchedule:
    block = {"priceMicros": price, "tickAlignment": alignment[0], "period": alignment[1]}
    return fees.FeeSpec.from_fee_block(block).schedule(activated, deactivated)


@st.composite
def subscriptions(draw: st.DrawFn) -> tuple[fees.FeeSchedule, fee_ticks.Fee, dt.datetime]:
    """A fee, its literal oracle, and a scheduled hour in the month after activation."""
    price = draw(st.integers(min_value=1, max_value=5_000_000_000))
    alignment = draw(ALIGNMENTS)
    activated = at(draw(INSTANTS))
    deactivated = None
    if draw(st.booleans()):
        deactivated = activated + dt.timedelta(seconds=draw(st.integers(1, 40 * 86400)))
    hours_in = draw(st.integers(0, 743))
    scheduled = max(MONTH[0] + HOUR * hours_in, activated)
    oracle = fee_ticks.Fee(price, alignment[0], alignment[1], activated, deactivated)
    return schedule(price, alignment, activated, deactivated), oracle, scheduled


class TestFutureFees:
    @settings(max_examples=300, deadline=None)
    @given(subscriptions())
    def test_future_fees_are_the_oracle_fee_of_the_rest_of_the_period(
        self, case: tuple[fees.FeeSchedule, fee_ticks.Fee, dt.datetime]
    ) -> None:
        fee, oracle, scheduled = case
        outlook = forecast.Outlook(fee, usage.ActiveInterval(oracle.activated, oracle.deactivated))
        rest = scheduled.replace(minute=0, second=0, microsecond=0) + HOUR
        assert forecast.future_fee(outlook, scheduled, MONTH[1]) == oracle.fee(rest, MONTH[1])

    @settings(max_examples=150, deadline=None)
    @given(subscriptions())
    def test_with_no_usage_the_forecast_at_any_hour_is_what_the_ledger_holds_at_the_end(
        self, case: tuple[fees.FeeSchedule, fee_ticks.Fee, dt.datetime]
    ) -> None:
        """Spent is the fee rows the charge run wrote up to the scheduled hour; the forecast
        then equals the sum of the period's fee rows once the period is over."""
        fee, oracle, scheduled = case
        start = max(MONTH[0], oracle.activated.replace(minute=0, second=0, microsecond=0))
        anchor = scheduled.replace(minute=0, second=0, microsecond=0)
        written = sum(amount for _, amount in fee.hourly(start, anchor + HOUR))
        outlook = forecast.Outlook(fee, usage.ActiveInterval(oracle.activated, oracle.deactivated))
        made = forecast.forecast(written, [outlook], scheduled, MONTH[1])
        at_the_end = sum(amount for _, amount in fee.hourly(start, MONTH[1]))
        assert made.total == at_the_end == oracle.fee(start, MONTH[1])
        assert made.future_usage == 0

    def test_a_monthly_fee_closing_at_the_period_end_is_forecast_before_it_shows_in_spend(
        self,
    ) -> None:
        # Activated 15 Feb: the opening tick closed on 1 Mar; the next closes on 1 Apr, in the
        # last hour of March.
        fee = schedule(300_000_000, ("MonthBoundary", "1"), at(-14 * 86400), None)
        outlook = forecast.Outlook(fee, usage.ActiveInterval(at(-14 * 86400)))
        made = forecast.forecast(0, [outlook], at(10 * 86400), MONTH[1])
        assert made.spent == 0 and made.future_fees == 300_000_000

    def test_a_deactivation_stops_the_fee_at_its_snapped_boundary(self) -> None:
        # HourBoundary 1 at 1.00 from the 1st, deactivated on the 3rd at 10:20 -> ends 11:00.
        fee = schedule(1_000_000, ("HourBoundary", "1"), at(0), at(2 * 86400 + 37_200))
        outlook = forecast.Outlook(fee, usage.ActiveInterval(at(0), at(2 * 86400 + 37_200)))
        # Scheduled at 08:00 on the 3rd: hours 09:00..10:00 close ticks at 10:00 and 11:00.
        assert forecast.future_fee(outlook, at(2 * 86400 + 8 * 3600), MONTH[1]) == 2_000_000


class TestUsageEstimate:
    def test_the_window_is_the_week_of_whole_hours_before_the_scheduled_hour(self) -> None:
        lo, hi = forecast.usage_window(at(20 * 86400 + 3600 + 59))
        assert hi == at(20 * 86400 + 3600)
        assert hi - lo == HOUR * forecast.USAGE_WINDOW_HOURS == dt.timedelta(days=7)

    @pytest.mark.parametrize(
        ("activated", "deactivated", "hours"),
        [
            (at(0), None, 168),  # active all week
            (at(-30 * 86400), None, 168),
            (at(10 * 86400 + 1800), None, 4 * 24),  # from 11 Mar 00:30: its hour counts
            (at(0), at(9 * 86400 + 1), 2 * 24 + 1),  # until 10 Mar 00:00:01: that hour counts
            (at(0), at(9 * 86400), 2 * 24),  # until exactly 10 Mar 00:00
        ],
    )
    def test_active_hours_count_every_hour_that_overlaps_the_active_interval(
        self, activated: dt.datetime, deactivated: dt.datetime | None, hours: int
    ) -> None:
        interval = usage.ActiveInterval(activated, deactivated)
        # The window of a run on 15 Mar 00:00: 8 Mar 00:00 .. 15 Mar 00:00.
        assert forecast.active_hours(interval, *forecast.usage_window(at(14 * 86400))) == hours

    @settings(max_examples=200, deadline=None)
    @given(
        rate=st.integers(min_value=0, max_value=50_000_000),
        activated=INSTANTS,
        hours_in=st.integers(min_value=0, max_value=743),
    )
    def test_a_constant_hourly_usage_is_extrapolated_exactly(
        self, rate: int, activated: int, hours_in: int
    ) -> None:
        interval = usage.ActiveInterval(at(activated))
        scheduled = max(MONTH[0] + HOUR * hours_in, at(activated))
        observed = forecast.active_hours(interval, *forecast.usage_window(scheduled))
        outlook = forecast.Outlook(None, interval, recent_usage_micros=rate * observed)
        anchor = scheduled.replace(minute=0, second=0, microsecond=0)
        left = forecast.active_hours(interval, anchor + HOUR, MONTH[1])
        expected = rate * left if observed else 0
        assert forecast.future_usage(outlook, scheduled, MONTH[1]) == expected

    def test_the_rate_is_per_active_hour_and_rounded_half_to_even_once(self) -> None:
        # Active for 3 hours of the window, 10 micros in them: 10/3 per hour, 700 hours left.
        interval = usage.ActiveInterval(at(20 * 86400 - 3 * 3600))
        outlook = forecast.Outlook(None, interval, recent_usage_micros=10)
        scheduled = at(20 * 86400)
        left = 743 - 20 * 24
        assert forecast.future_usage(outlook, scheduled, MONTH[1]) == money.round_half_even(
            Fraction(10 * left, 3)
        )

    def test_usage_stops_at_a_recorded_deactivation(self) -> None:
        interval = usage.ActiveInterval(at(0), at(20 * 86400 + 5 * 3600))
        outlook = forecast.Outlook(None, interval, recent_usage_micros=168 * 1000)
        assert forecast.future_usage(outlook, at(20 * 86400), MONTH[1]) == 4 * 1000

    def test_a_subscription_with_no_history_in_the_window_adds_no_usage(self) -> None:
        interval = usage.ActiveInterval(at(20 * 86400 + 3600))
        outlook = forecast.Outlook(None, interval, recent_usage_micros=0)
        assert forecast.future_usage(outlook, at(20 * 86400 + 3600), MONTH[1]) == 0

    def test_the_forecast_adds_spent_fees_and_usage(self) -> None:
        fee = schedule(2_000_000, ("ActivatedAt", "1h"), at(0), None)
        interval = usage.ActiveInterval(at(0))
        outlooks = [
            forecast.Outlook(fee, interval),
            forecast.Outlook(None, interval, recent_usage_micros=168 * 500),
        ]
        made = forecast.forecast(1_234, outlooks, at(30 * 86400), MONTH[1])
        # 31 March 00:00 scheduled: hours 01:00 .. 23:00 are ahead (23 of them).
        assert (made.spent, made.future_fees, made.future_usage) == (1_234, 46_000_000, 11_500)
        assert made.total == 1_234 + 46_000_000 + 11_500
