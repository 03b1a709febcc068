"""What a budget period will cost: the ledger so far, the exact future fees, estimated usage.

Why not extrapolate the spend like cloud budgets do: a Subscription's fee is known in advance
from the billing model (every tick, the opening tick's proration, a deactivation snapped to
its boundary), so only usage needs estimating. The forecast at the scheduled hour `H` of a
charge run, for a period ending at `end`, is the sum of three parts:

- spent: what the ledger holds for the period's hours up to and including `H` (the hour in
  progress included, as the charge run just wrote it);
- future fees: `FeeSchedule.fee(H+1h, end)` of each Subscription, to the micro: the same
  function the charge run writes its hourly fee rows from, so once the period is over the
  ledger's fee rows add up to exactly what was forecast;
- future usage: each Subscription's usage charges over the last `USAGE_WINDOW_HOURS` whole
  hours before `H` (only the hours it was active count), as a rate per active hour, times its
  active hours in `[H+1h, end)`; rounded half to even once per Subscription.

A week of history follows the weekly rhythm of most workloads and still reacts within days
to a change in size; `benchmarks/forecast.py` measures the method against the naive linear
extrapolation of spend.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable
from fractions import Fraction

from finops.billing import fees, money, ticks, usage

USAGE_WINDOW_HOURS = 168
"""How many whole hours before the scheduled hour the usage rate is measured over."""


def usage_window(scheduled: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The hours `[H - window, H)` whose usage charges give each Subscription's rate."""
    anchor = ticks.floor_hour(scheduled)
    return anchor - ticks.HOUR * USAGE_WINDOW_HOURS, anchor


def active_hours(interval: usage.ActiveInterval, start: dt.datetime, end: dt.datetime) -> int:
    """Whole hours of `[start, end)` (on the hour) that overlap the active interval."""
    first = max(ticks.floor_hour(start), ticks.floor_hour(interval.activated_at))
    last = ticks.floor_hour(end)
    if interval.deactivated_at is not None:
        stop = interval.deactivated_at
        # The hour holding the deactivation still had active time in it.
        last = min(last, ticks.floor_hour(stop - dt.timedelta(microseconds=1)) + ticks.HOUR)
    return max(0, (last - first) // ticks.HOUR)


@dataclasses.dataclass(frozen=True, slots=True)
class Outlook:
    """One Subscription as the forecast sees it: its fee, when it is active, and the usage
    the ledger charged it over the usage window."""

    fee: fees.FeeSchedule | None
    interval: usage.ActiveInterval
    recent_usage_micros: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Forecast:
    """The three parts of a period's forecast, in integer micros."""

    spent: int
    future_fees: int
    future_usage: int

    @property
    def total(self) -> int:
        return self.spent + self.future_fees + self.future_usage


def future_fee(outlook: Outlook, scheduled: dt.datetime, end: dt.datetime) -> int:
    """The fee of `[H+1h, end)`, exactly as the charge run will write it hour by hour."""
    start = ticks.floor_hour(scheduled) + ticks.HOUR
    if outlook.fee is None or end <= start:
        return 0
    return outlook.fee.fee(start, end)


def future_usage(outlook: Outlook, scheduled: dt.datetime, end: dt.datetime) -> int:
    """The usage estimate of `[H+1h, end)`: the window's rate per active hour, extrapolated
    over the active hours left."""
    window = usage_window(scheduled)
    observed = active_hours(outlook.interval, *window)
    if observed == 0 or outlook.recent_usage_micros == 0:
        return 0
    ahead = active_hours(outlook.interval, ticks.floor_hour(scheduled) + ticks.HOUR, end)
    return money.round_half_even(Fraction(outlook.recent_usage_micros * ahead, observed))


def forecast(
    spent: int, outlooks: Iterable[Outlook], scheduled: dt.datetime, end: dt.datetime
) -> Forecast:
    """The forecast of a period ending at `end`, made at the scheduled hour `H`."""
    items = list(outlooks)
    end = ticks.utc(end)
    return Forecast(
        spent=spent,
        future_fees=sum(future_fee(o, scheduled, end) for o in items),
        future_usage=sum(future_usage(o, scheduled, end) for o in items),
    )
