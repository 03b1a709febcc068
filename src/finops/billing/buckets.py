"""The three `Subscription.status.costs` buckets, `hour`, `day` and `month`.

All three are anchored at the collection run's scheduled hour `H` (not at wall clock), so every
run inside one hour builds the same windows: `[H, H+1h)`, the UTC day holding `H`, and the UTC
calendar month holding `H`. In each bucket:

- `current` is what has settled: the fee for `[start, H)` (so the `hour` bucket's fee part is
  always zero) plus the usage charges of the window's hours up to and including `H`. With
  `settled_fees` (the ledger's fee rows) the fee part is their sum, not the calculator's;
- `projected` is the fee alone over the whole window, after the deactivation clamp;
- `breakdown` splits both by meter; zero fields and all-zero entries are omitted.

An Offering without a fee still gets buckets carrying its usage (we go beyond the reference
there, DESIGN §2.6).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable
from typing import Protocol

from finops.api import bodies, models
from finops.billing import fees, money, ticks, usage


class SettledCharge(Protocol):
    """A usage charge row as read back from the ledger or computed by the usage meters."""

    @property
    def hour(self) -> dt.datetime: ...

    @property
    def source(self) -> str: ...

    @property
    def amount_micros(self) -> int: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Charge:
    """A plain settled usage charge (hour, meter name, micros), e.g. a ledger row."""

    hour: dt.datetime
    source: str
    amount_micros: int


@dataclasses.dataclass(frozen=True, slots=True)
class MeterCost:
    """One `breakdown` entry."""

    name: str
    current: int = 0
    projected: int = 0

    def to_status(self) -> bodies.CostMetricBody:
        """The API shape, zero fields omitted."""
        body: bodies.CostMetricBody = {"name": self.name}
        if self.current:
            body["current"] = self.current
        if self.projected:
            body["projected"] = self.projected
        return body


@dataclasses.dataclass(frozen=True, slots=True)
class BucketCosts:
    """One `status.costs` entry."""

    granularity: models.Granularity
    start: dt.datetime
    end_exclusive: dt.datetime
    current: int = 0
    projected: int = 0
    breakdown: tuple[MeterCost, ...] = ()

    def to_status(self) -> bodies.CostBucketBody:
        """The API shape: `current`, `projected` and `breakdown` omitted when zero/empty."""
        body: bodies.CostBucketBody = {
            "granularity": self.granularity.value,
            "start": ticks.rfc3339(self.start),
            "endExclusive": ticks.rfc3339(self.end_exclusive),
        }
        if self.current:
            body["current"] = self.current
        if self.projected:
            body["projected"] = self.projected
        if self.breakdown:
            body["breakdown"] = [entry.to_status() for entry in self.breakdown]
        return body


def windows(scheduled_at: dt.datetime) -> list[tuple[models.Granularity, dt.datetime, dt.datetime]]:
    """The three half-open windows for a run scheduled at `scheduled_at` (truncated to the hour)."""
    anchor = ticks.floor_hour(scheduled_at)
    day = ticks.floor_day(anchor)
    month = ticks.month_index(anchor)
    return [
        (models.Granularity.HOUR, anchor, anchor + ticks.HOUR),
        (models.Granularity.DAY, day, day + ticks.DAY),
        (models.Granularity.MONTH, ticks.month_start(month), ticks.month_start(month + 1)),
    ]


def build(
    scheduled_at: dt.datetime,
    fee: fees.FeeSchedule | None,
    usage_charges: Iterable[SettledCharge] = (),
    settled_fees: Iterable[SettledCharge] | None = None,
) -> list[BucketCosts]:
    """The three buckets of one Subscription for the run scheduled at `scheduled_at`.

    `fee` is None for an Offering without `subscriptionFee`. `usage_charges` are usage rows
    only. The fee's `projected` always comes from `fee`; its `current` comes from
    `settled_fees` (fee rows as stored, so the status agrees with the ledger) when given, and
    from `fee` otherwise (equal while the ledger is intact).
    """
    anchor = ticks.floor_hour(scheduled_at)
    charges = list(usage_charges)
    for charge in charges:
        if charge.source == models.MeterName.SUBSCRIPTION:
            raise ValueError("pass usage charges only; the fee is computed from the FeeSchedule")
    fee_rows = None if settled_fees is None else list(settled_fees)
    order = {meter.value: i for i, meter in enumerate(usage.USAGE_METERS)}
    buckets: list[BucketCosts] = []
    for granularity, start, end in windows(anchor):
        breakdown: list[MeterCost] = []
        fee_current = fee_projected = 0
        if fee is not None:
            fee_current = fee.fee(start, min(anchor, end))
            fee_projected = fee.fee(start, end)
        if fee_rows is not None:
            fee_current = _fee_sum(fee_rows, start, min(anchor, end))
        if fee_current or fee_projected:
            breakdown.append(
                MeterCost(models.MeterName.SUBSCRIPTION.value, fee_current, fee_projected)
            )
        per_meter: dict[str, int] = {}
        for charge in charges:
            hour = ticks.utc(charge.hour)
            if start <= hour < end and hour <= anchor:
                per_meter[charge.source] = per_meter.get(charge.source, 0) + charge.amount_micros
        for name in sorted(per_meter, key=lambda n: (order.get(n, len(order)), n)):
            if per_meter[name]:
                breakdown.append(MeterCost(name, current=per_meter[name]))
        buckets.append(
            BucketCosts(
                granularity=granularity,
                start=start,
                end_exclusive=end,
                current=money.Micros(fee_current + sum(per_meter.values())),
                projected=fee_projected,
                breakdown=tuple(breakdown),
            )
        )
    return buckets


def _fee_sum(rows: Iterable[SettledCharge], start: dt.datetime, end: dt.datetime) -> int:
    """The fee rows whose hour lies in `[start, end)`: the hours whose tick has closed."""
    return sum(r.amount_micros for r in rows if start <= ticks.utc(r.hour) < end)


def to_status(buckets: Iterable[BucketCosts]) -> list[bodies.CostBucketBody]:
    """`status.costs` as written to the Subscription."""
    return [bucket.to_status() for bucket in buckets]
