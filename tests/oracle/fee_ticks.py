"""The subscription fee read literally from the billing model: list every tick boundary one by
one and price each, without the product's counting formulas.

- ActivatedAt: a boundary every `period` after `activatedAt`;
- HourBoundary N: every N hours on the UTC grid counted from the Unix epoch;
- DayBoundary N: the first midnight after activation, then every N days;
- MonthBoundary N: the first of every N-th month after the activation's month.
A boundary exactly at `activatedAt` is not one. The opening tick costs the full price under
ActivatedAt, and `price × opening seconds // nominal period seconds` otherwise (whole seconds
of activation, months counted as 2,629,800 s); every later tick costs the price. A
deactivation moves the end to the first boundary at or after it; no boundary after that end
is charged. The fee of a window `[start, end)` is that of its boundaries `b`,
`start < b <= end`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Iterator

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
FIXED_MONTH_SECONDS = 2_629_800


@dataclasses.dataclass(frozen=True)
class Fee:
    price: int
    alignment: str
    period: str
    activated: dt.datetime
    deactivated: dt.datetime | None = None

    def _every(self) -> Iterator[dt.datetime]:
        a = self.activated
        if self.alignment == "ActivatedAt":
            amount, unit = re.fullmatch(r"([0-9]+)([hms])", self.period).groups()  # type: ignore[union-attr]
            step = dt.timedelta(seconds=int(amount) * {"h": 3600, "m": 60, "s": 1}[unit])
            b = a + step
            while True:
                yield b
                b += step
        n = int(self.period)
        if self.alignment == "HourBoundary":
            b = EPOCH
            step = dt.timedelta(hours=n)
            b += step * ((a - EPOCH) // step)
            while True:
                if b > a:
                    yield b
                b += step
        if self.alignment == "DayBoundary":
            b = a.replace(hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=1)
            while True:
                yield b
                b += dt.timedelta(days=n)
        year, month = a.year, a.month
        while True:
            month += n
            year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
            yield dt.datetime(year, month, 1, tzinfo=UTC)

    def _nominal_seconds(self) -> int:
        if self.alignment == "HourBoundary":
            return int(self.period) * 3600
        if self.alignment == "DayBoundary":
            return int(self.period) * 86400
        return int(self.period) * FIXED_MONTH_SECONDS

    def ticks(self, until: dt.datetime) -> Iterator[tuple[dt.datetime, int]]:
        """(boundary, fee) of every charged boundary up to `until`, in order."""
        end: dt.datetime | None = None
        for i, b in enumerate(self._every()):
            if self.deactivated is not None and end is None and b >= self.deactivated:
                end = b
            if b > until or (end is not None and b > end):
                return
            if i == 0 and self.alignment != "ActivatedAt":
                opening = (b - self.activated.replace(microsecond=0)) // dt.timedelta(seconds=1)
                yield b, self.price * opening // self._nominal_seconds()
            else:
                yield b, self.price

    def fee(self, start: dt.datetime, end: dt.datetime) -> int:
        """The fee of the window `[start, end)`: boundaries in `(start, end]`."""
        return sum(amount for b, amount in self.ticks(end) if b > start)
