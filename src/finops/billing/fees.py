"""The recurring subscription fee: a price and a clock, no measurement.

`fee(start, end) = priceMicros × (ticks(end) − ticks(start))`, except that under the boundary
alignments the opening tick is prorated against the alignment's nominal period, and that a
deactivation is snapped forward to the next boundary with both window ends clamped to it.
Both adjustments are folded into one monotone function, `FeeSchedule.accrued(t)` (the fee
earned in `(activatedAt, t]`), so the fee of any window is a difference of two values of it.
That single shape is what makes fees additive over any partition of a window and makes a
recomputed window always give the same number.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

from finops.api import bodies, models
from finops.billing import money, ticks

Service: TypeAlias = tuple[dt.datetime, dt.datetime]
HourSpan: TypeAlias = tuple[dt.datetime, int, int, Service | None]
"""(hour, ticks closed, micros, service the ticks pay for) of one fee row."""
HourRun: TypeAlias = tuple[dt.datetime, int, int, int, Service | None]
"""(first hour, hours, ticks closed in each, micros of each, service of the first): `hours`
consecutive fee rows alike but for time, each row's hour and service one hour after the last's."""


def shifted(span: Service | None, hours: int) -> Service | None:
    """A run's service `hours` rows on (None stays None: a row that closes no tick)."""
    if span is None:
        return None
    step = ticks.HOUR * hours
    return span[0] + step, span[1] + step


def fold(runs: Iterable[HourRun]) -> list[HourRun]:
    """Adjacent runs that continue one another joined into one (the longest runs)."""
    out: list[HourRun] = []
    for run in runs:
        if out:
            hour, hours, closed, micros, span = out[-1]
            if (
                run[2] == closed
                and run[3] == micros
                and run[0] == hour + ticks.HOUR * hours
                and run[4] == shifted(span, hours)
            ):
                out[-1] = (hour, hours + run[1], closed, micros, span)
                continue
        out.append(run)
    return out


def runs_of(rows: Iterable[HourSpan]) -> list[HourRun]:
    """Fee rows as the fewest runs that stand for them."""
    return fold((hour, 1, closed, micros, span) for hour, closed, micros, span in rows)


def expand(runs: Iterable[HourRun]) -> list[HourSpan]:
    """The fee rows a list of runs stands for, one per hour (what the ledger stores)."""
    return [
        (hour + ticks.HOUR * k, closed, micros, shifted(span, k))
        for hour, hours, closed, micros, span in runs
        for k in range(hours)
    ]


class FeeSpecError(ValueError):
    """A `subscriptionFee` block that cannot be billed (wrong types, bad period)."""


def _positive_int(block: Mapping[str, Any], key: str, *, required: bool) -> int | None:
    value = block.get(key)
    if value is None:
        if required:
            raise FeeSpecError(f"subscriptionFee.{key} is required")
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise FeeSpecError(f"subscriptionFee.{key} must be an integer, got {value!r}")
    if value < 1:
        raise FeeSpecError(f"subscriptionFee.{key} must be >= 1, got {value}")
    if key == "priceMicros" and value > money.MAX_MICROS:
        raise FeeSpecError(f"subscriptionFee.{key} {value} does not fit a 64-bit micro amount")
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class FeeSpec:
    """An Offering's `spec.pricing.subscriptionFee`, checked once and then trusted."""

    price_micros: int
    tick_alignment: models.TickAlignment
    period: str
    min_periods: int | None = None

    def __post_init__(self) -> None:
        try:
            # Accept the raw API string too, so `is` comparisons below stay valid.
            object.__setattr__(self, "tick_alignment", models.TickAlignment(self.tick_alignment))
            ticks.parse_period(self.tick_alignment, self.period)
        except ValueError as err:
            raise FeeSpecError(f"subscriptionFee: {err}") from None

    @classmethod
    def from_fee_block(cls, block: bodies.SubscriptionFeeBody) -> FeeSpec:
        """Build from the raw `subscriptionFee` mapping of a Kubernetes object."""
        price = _positive_int(block, "priceMicros", required=True)
        assert price is not None
        alignment_raw = block.get("tickAlignment")
        try:
            alignment = models.TickAlignment(str(alignment_raw))
        except ValueError:
            allowed = ", ".join(a.value for a in models.TickAlignment)
            raise FeeSpecError(
                f"subscriptionFee.tickAlignment must be one of {allowed}, got {alignment_raw!r}"
            ) from None
        period = block.get("period")
        if not isinstance(period, str):
            raise FeeSpecError(f"subscriptionFee.period must be a string, got {period!r}")
        return cls(
            price_micros=price,
            tick_alignment=alignment,
            period=period,
            min_periods=_positive_int(block, "minPeriods", required=False),
        )

    @classmethod
    def from_offering_spec(cls, spec: bodies.OfferingSpecBody) -> FeeSpec | None:
        """The fee of an Offering's `spec`, or None for an Offering without one."""
        pricing = spec.get("pricing") or {}
        block = pricing.get("subscriptionFee")
        if block is None:
            return None
        if not isinstance(block, Mapping):
            raise FeeSpecError(f"subscriptionFee must be an object, got {block!r}")
        return cls.from_fee_block(block)

    def clock(self, activated_at: dt.datetime) -> ticks.TickClock:
        """The tick clock of a Subscription activated at `activated_at` on these terms."""
        return ticks.TickClock(
            self.tick_alignment,
            ticks.parse_period(self.tick_alignment, self.period),
            ticks.utc(activated_at),
        )

    def schedule(
        self, activated_at: dt.datetime, deactivated_at: dt.datetime | None = None
    ) -> FeeSchedule:
        """The fee of one Subscription's life on these terms."""
        return FeeSchedule.create(self, activated_at, deactivated_at)


@dataclasses.dataclass(frozen=True, slots=True)
class FeeSchedule:
    """One Subscription's fee as a function of time.

    `end` is the deactivation snapped forward to a boundary (None while active); it exists
    only inside this calculation and is never written back to `status.deactivatedAt`.
    """

    spec: FeeSpec
    clock: ticks.TickClock
    deactivated_at: dt.datetime | None
    end: dt.datetime | None
    opening_tick_micros: int

    @classmethod
    def create(
        cls,
        spec: FeeSpec,
        activated_at: dt.datetime,
        deactivated_at: dt.datetime | None = None,
    ) -> FeeSchedule:
        clock = spec.clock(activated_at)
        raw_end = None if deactivated_at is None else ticks.utc(deactivated_at)
        end = None if raw_end is None else clock.snap(raw_end)
        if spec.tick_alignment is models.TickAlignment.ACTIVATED_AT:
            opening = spec.price_micros
        else:
            # Whole seconds, integer division: rounded down to a whole micro.
            opening = spec.price_micros * clock.opening_seconds() // clock.nominal_period_seconds()
        return cls(spec, clock, raw_end, end, opening)

    def ticks(self, t: dt.datetime) -> int:
        """Boundaries in `(activatedAt, t]`, ignoring deactivation: the `minPeriods` counter."""
        return self.clock.count(t)

    def billed_ticks(self, t: dt.datetime) -> int:
        """Boundaries in `(activatedAt, min(t, snapped end)]`: the ticks actually charged."""
        return self.clock.count(self._clamp(t))

    def _clamp(self, t: dt.datetime) -> dt.datetime:
        t = ticks.utc(t)
        return t if self.end is None or t <= self.end else self.end

    def accrued(self, t: dt.datetime) -> money.Micros:
        """Fee earned in `(activatedAt, t]`, after proration and the deactivation clamp."""
        n = self.billed_ticks(t)
        if n == 0:
            return money.Micros(0)
        return money.Micros(self.opening_tick_micros + (n - 1) * self.spec.price_micros)

    def fee(self, start: dt.datetime, end: dt.datetime) -> money.Micros:
        """The fee charged in the window `[start, end)` (boundaries in `(start, end]`)."""
        if ticks.utc(end) < ticks.utc(start):
            raise ValueError(f"window ends ({end.isoformat()}) before it starts")
        return money.Micros(self.accrued(end) - self.accrued(start))

    def hourly(self, start: dt.datetime, end: dt.datetime) -> list[tuple[dt.datetime, int]]:
        """`(hour, micros)` for every whole hour in `[start, end)`, zero hours included.

        This is what the collection job writes as `subscription` charge rows.
        """
        first, last = ticks.utc(start), ticks.utc(end)
        if not (ticks.is_whole_hour(first) and ticks.is_whole_hour(last)):
            raise ValueError("hourly windows must start and end on whole UTC hours")
        rows: list[tuple[dt.datetime, int]] = []
        hour = first
        before = self.accrued(hour)
        while hour < last:
            after = self.accrued(hour + ticks.HOUR)
            rows.append((hour, after - before))
            hour, before = hour + ticks.HOUR, after
        return rows

    def covered(self, before: int, after: int) -> tuple[dt.datetime, dt.datetime] | None:
        """The service ticks `before + 1 … after` pay for: from the boundary before the first
        of them (activation, for the opening tick) to the last one; None for no tick."""
        if after <= before:
            return None
        start = self.clock.activated_at if before == 0 else self.clock.boundary(before)
        return start, self.clock.boundary(after)

    def hourly_spans(self, start: dt.datetime, end: dt.datetime) -> list[HourSpan]:
        """`(hour, ticks closed, micros, service)` for every whole hour in `[start, end)`:
        `hourly` with the boundaries each hour closes and the service they pay for (`covered`),
        so a statement names the period a fee is for, not the hour that closed it.

        A run writes one fee row per Subscription-hour, so this is on the hot path: each hour
        edge is counted once, every boundary named is computed in one batch, and the rows are
        made in a single pass.
        """
        first, last = ticks.utc(start), ticks.utc(end)
        if not (ticks.is_whole_hour(first) and ticks.is_whole_hour(last)):
            raise ValueError("hourly windows must start and end on whole UTC hours")
        step, snapped = ticks.HOUR, self.end
        edges = [first + step * i for i in range(max(0, (last - first) // step) + 1)]
        # `billed_ticks` of every hour edge at once: the deactivation clamp, then one count.
        counts = self.clock.counts(
            edges if snapped is None else [t if t <= snapped else snapped for t in edges]
        )
        named = sorted({n for n in counts if n >= 1})
        at = dict(zip(named, self.clock.boundaries(named), strict=True))
        opening, price, activated = (
            self.opening_tick_micros,
            self.spec.price_micros,
            self.clock.activated_at,
        )
        rows: list[HourSpan] = []
        n_before = counts[0]
        accrued = 0 if n_before == 0 else opening + (n_before - 1) * price
        for hour, n_after in zip(edges[:-1], counts[1:], strict=True):
            if n_after == n_before:
                rows.append((hour, 0, 0, None))
                continue
            after = opening + (n_after - 1) * price  # n_after >= 1: it grew
            opened = activated if n_before == 0 else at[n_before]
            rows.append((hour, n_after - n_before, after - accrued, (opened, at[n_after])))
            n_before, accrued = n_after, after
        return rows

    def hourly_runs(self, start: dt.datetime, end: dt.datetime) -> list[HourRun]:
        """`hourly_spans` of `[start, end)` as runs (`expand` gives the rows back).

        A charge run writes a fee row for every Subscription-hour; most clocks close the same
        ticks every hour (`TickClock.ticks_per_hour`), so from the first hour that starts at
        or after the first boundary to the hour holding the deactivation the rows are one run,
        worked out from its first hour alone, and a day's window costs what an hour's does.
        The hours around that run, and every hour of the other clocks, are computed by
        `hourly_spans` and folded.
        """
        first, last = ticks.utc(start), ticks.utc(end)
        q = self.clock.ticks_per_hour()
        if q is None:
            return runs_of(self.hourly_spans(first, last))
        b1 = self.clock.first_boundary()
        lo = ticks.floor_hour(b1)
        lo = max(first, lo if lo == b1 else lo + ticks.HOUR)
        # Up to the hour holding the snapped end: every hour before it closes q ticks.
        hi = last if self.end is None else min(last, ticks.floor_hour(self.end))
        if lo >= hi:
            return runs_of(self.hourly_spans(first, last))
        n = self.clock.count(lo)  # >= 1: lo is at or after the first boundary
        at = self.clock.boundaries([n, n + q])
        middle = (lo, (hi - lo) // ticks.HOUR, q, q * self.spec.price_micros, (at[0], at[1]))
        if first == lo and hi == last:
            return [middle]  # the usual hourly run: no opening or closing hour in the window
        head = runs_of(self.hourly_spans(first, lo)) if first < lo else []
        tail = runs_of(self.hourly_spans(hi, last)) if hi < last else []
        return fold([*head, middle, *tail])

    def min_periods_elapsed(self, now: dt.datetime) -> bool:
        """The `minPeriods` finalizer guard: enough boundaries since activation, by `now`.

        Counted with the fee's own counter, from `activatedAt`, not from the deletion.
        """
        needed = self.spec.min_periods
        return needed is None or self.ticks(now) >= needed

    def last_billable_hour(self) -> dt.datetime | None:
        """The hour window holding the final charged boundary (None while active).

        A boundary at `b` belongs to the window `[h, h+1h)` with `h < b <= h+1h`; charges are
        not settled until this hour is finalized, which can be later than the hour of the
        raw deactivation when the period is long.
        """
        if self.end is None:
            return None
        return ticks.floor_hour(self.end - dt.timedelta(microseconds=1))
