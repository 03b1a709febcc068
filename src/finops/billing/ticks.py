"""Tick boundaries: where a Subscription's billing periods end, for each `tickAlignment`.

A tick boundary closes one billing period. `TickClock.count(t)` is the number of boundaries
in `(activatedAt, t]`: a boundary at the activation instant is never counted and one exactly at
`t` is, which is what lets hourly windows partition a Subscription's life without counting a
boundary twice. Every function here is a pure function of its arguments (no clock reads), and
all arithmetic is on integers or `timedelta`, so the same inputs always give the same count.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Callable, Sequence

from finops.api import models

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)
# The fixed month used as the MonthBoundary proration denominator: 365.25 / 12 days.
FIXED_MONTH_SECONDS = 2_629_800

_ACTIVATED_AT_PERIOD = re.compile(r"^([0-9]+)([hms])$")
_BOUNDARY_PERIOD = re.compile(r"^([0-9]+)$")
_UNIT_SECONDS = {"h": 3600, "m": 60, "s": 1}

PERIOD_MISMATCH_MESSAGE = (
    "period must be a Go duration (e.g. '1h') for ActivatedAt alignment, "
    "or a plain integer for boundary alignments"
)


class PeriodError(ValueError):
    """A `period` that does not fit its `tickAlignment`, or that is zero."""


def utc(t: dt.datetime) -> dt.datetime:
    """The same instant in dt.UTC; a naive datetime is refused rather than guessed at. Already
    in dt.UTC, `t` itself (a fee row's hours pass through here a few times each)."""
    if t.tzinfo is dt.UTC:
        return t
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"datetime {t.isoformat()} has no timezone; billing needs aware dt.UTC")
    return t.astimezone(dt.UTC)


def require_aware(**values: dt.datetime) -> None:
    """Refuses a naive datetime, naming the argument: a window's bounds are instants, and a
    naive one would be read in whatever zone the database session happens to have."""
    for what, value in values.items():
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{what} must be timezone-aware, got {value!r}")


def floor_hour(t: dt.datetime) -> dt.datetime:
    """Start of the dt.UTC hour containing `t`."""
    return utc(t).replace(minute=0, second=0, microsecond=0)


def floor_day(t: dt.datetime) -> dt.datetime:
    """Midnight dt.UTC starting the day containing `t`."""
    return utc(t).replace(hour=0, minute=0, second=0, microsecond=0)


def month_index(t: dt.datetime) -> int:
    """Months since year 0 of the dt.UTC month containing `t` (for month arithmetic on ints)."""
    u = utc(t)
    return u.year * 12 + (u.month - 1)


def month_start(index: int) -> dt.datetime:
    """The 1st at 00:00 dt.UTC of the month with `month_index` `index`."""
    year, month0 = divmod(index, 12)
    return dt.datetime(year, month0 + 1, 1, tzinfo=dt.UTC)


def floor_month(t: dt.datetime) -> dt.datetime:
    """The 1st at 00:00 dt.UTC of the month containing `t`."""
    return month_start(month_index(t))


def is_whole_hour(t: dt.datetime) -> bool:
    """True when `t` is exactly the start of a dt.UTC hour."""
    return floor_hour(t) == utc(t)


def rfc3339(t: dt.datetime) -> str:
    """`t` as the API writes times: RFC 3339, dt.UTC, whole seconds, `Z` suffix."""
    return utc(t).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_period(alignment: models.TickAlignment, period: str) -> int:
    """The period as an integer: seconds for `ActivatedAt`, else hours, days or months.

    Mirrors the CRD rule: `ActivatedAt` takes `^[0-9]+[hms]$` (`1h`, `90m`, `3600s`; not
    `1h30m`), the boundary alignments a plain integer. Zero is refused: it has no boundaries.
    """
    if alignment is models.TickAlignment.ACTIVATED_AT:
        match = _ACTIVATED_AT_PERIOD.match(period)
        if match is None:
            raise PeriodError(f"{PERIOD_MISMATCH_MESSAGE}: got {period!r} for {alignment}")
        amount = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    else:
        match = _BOUNDARY_PERIOD.match(period)
        if match is None:
            raise PeriodError(f"{PERIOD_MISMATCH_MESSAGE}: got {period!r} for {alignment}")
        amount = int(match.group(1))
    if amount == 0:
        raise PeriodError(f"period {period!r} is zero; a tick needs a positive length")
    return amount


@dataclasses.dataclass(frozen=True, slots=True)
class TickClock:
    """The boundaries of one Subscription: its alignment, its period and its `activatedAt`.

    `amount` is the parsed period (see `parse_period`). Boundaries are numbered from 1; the
    first is the earliest boundary strictly after `activated_at`.
    """

    alignment: models.TickAlignment
    amount: int
    activated_at: dt.datetime

    def __post_init__(self) -> None:
        # Normalise once so the hot counting methods can compare with `is` and skip checks.
        object.__setattr__(self, "alignment", models.TickAlignment(self.alignment))
        object.__setattr__(self, "activated_at", utc(self.activated_at))
        if self.amount < 1:
            raise PeriodError(f"period amount must be >= 1, got {self.amount}")

    @classmethod
    def create(cls, alignment: str, period: str, activated_at: dt.datetime) -> TickClock:
        """Build a clock from the raw API strings, refusing a period that does not fit."""
        try:
            kind = models.TickAlignment(alignment)
        except ValueError:
            allowed = ", ".join(a.value for a in models.TickAlignment)
            raise PeriodError(f"tickAlignment {alignment!r} is not one of: {allowed}") from None
        return cls(kind, parse_period(kind, period), utc(activated_at))

    @property
    def _step(self) -> dt.timedelta:
        if self.alignment is models.TickAlignment.ACTIVATED_AT:
            return dt.timedelta(seconds=self.amount)
        if self.alignment is models.TickAlignment.HOUR_BOUNDARY:
            return HOUR * self.amount
        if self.alignment is models.TickAlignment.DAY_BOUNDARY:
            return DAY * self.amount
        raise AssertionError("months have no fixed step")  # pragma: no cover

    @property
    def _first_midnight(self) -> dt.datetime:
        return floor_day(self.activated_at) + DAY

    def count(self, t: dt.datetime) -> int:
        """`ticks(t)`: the number of boundaries in `(activated_at, t]`."""
        return self._counter()(utc(t))

    def counts(self, times: Sequence[dt.datetime]) -> list[int]:
        """`count` of each of `times`, the alignment's constants worked out once: a charge
        run counts about 25 instants for each of thousands of fees."""
        counter = self._counter()
        return [counter(utc(t)) for t in times]

    def _counter(self) -> Callable[[dt.datetime], int]:
        """`count` of a dt.UTC instant, with the step and first boundary already computed."""
        a = self.activated_at
        if self.alignment is models.TickAlignment.ACTIVATED_AT:
            step = self._step
            return lambda t: 0 if t <= a else (t - a) // step
        if self.alignment is models.TickAlignment.HOUR_BOUNDARY:
            # A cluster-wide grid counted from the Unix epoch (midnight dt.UTC).
            step = self._step
            base = (a - EPOCH) // step
            return lambda t: 0 if t <= a else (t - EPOCH) // step - base
        if self.alignment is models.TickAlignment.DAY_BOUNDARY:
            step, first = self._step, self._first_midnight
            return lambda t: 0 if t <= a or t < first else (t - first) // step + 1
        start, amount = month_index(a), self.amount
        return lambda t: 0 if t <= a else max(0, (month_index(t) - start) // amount)

    def boundary(self, n: int) -> dt.datetime:
        """The `n`-th boundary after activation (`n` >= 1)."""
        if n < 1:
            raise ValueError(f"boundaries are numbered from 1, got {n}")
        return self.boundaries([n])[0]

    def boundaries(self, ns: Sequence[int]) -> list[dt.datetime]:
        """`boundary` of each of `ns` (each >= 1), the alignment's constants worked out once:
        a charge run names the boundaries of every fee row it writes."""
        if any(n < 1 for n in ns):
            raise ValueError("boundaries are numbered from 1")
        a = self.activated_at
        if self.alignment is models.TickAlignment.ACTIVATED_AT:
            step = self._step
            return [a + step * n for n in ns]
        if self.alignment is models.TickAlignment.HOUR_BOUNDARY:
            step = self._step
            base = (a - EPOCH) // step
            return [EPOCH + step * (base + n) for n in ns]
        if self.alignment is models.TickAlignment.DAY_BOUNDARY:
            step, first = self._step, self._first_midnight
            return [first + step * (n - 1) for n in ns]
        start, amount = month_index(a), self.amount
        return [month_start(start + n * amount) for n in ns]

    def ticks_per_hour(self) -> int | None:
        """`q` when, from the first boundary on, every whole hour closes exactly `q` boundaries
        and names boundaries one hour later than the hour before (`ActivatedAt` with a period
        that divides an hour, `HourBoundary` of 1); None for any other clock. A run's fee rows
        of such a clock are one arithmetic run, not one computation per hour."""
        if self.alignment is models.TickAlignment.ACTIVATED_AT and 3600 % self.amount == 0:
            return 3600 // self.amount
        if self.alignment is models.TickAlignment.HOUR_BOUNDARY and self.amount == 1:
            return 1
        return None

    def first_boundary(self) -> dt.datetime:
        """The boundary that closes the opening tick."""
        return self.boundary(1)

    def snap(self, t: dt.datetime) -> dt.datetime:
        """The first boundary at or after `t` (a boundary itself is not moved).

        Used for deactivation: the final tick is always charged in full. An instant at or
        before activation snaps to the first boundary.
        """
        n = self.count(t)
        if n >= 1 and self.boundary(n) == utc(t):
            return utc(t)
        return self.boundary(n + 1)

    def nominal_period_seconds(self) -> int:
        """The full-period denominator of opening-tick proration, in seconds."""
        if self.alignment is models.TickAlignment.MONTH_BOUNDARY:
            return self.amount * FIXED_MONTH_SECONDS
        return self._step // dt.timedelta(seconds=1)

    def opening_seconds(self) -> int:
        """Whole seconds from activation to the first boundary; sub-seconds of
        `activated_at` are discarded, as the billing model specifies."""
        start = self.activated_at.replace(microsecond=0)
        return (self.first_boundary() - start) // dt.timedelta(seconds=1)
