"""Usage meters: measured consumption in allocation rows, priced per row, rounded once.

For every allocation row a Subscription's sources select, each priced meter reads its own
signal for the part of the row inside the Subscription's active interval
`[activatedAt, deactivatedAt)` (the raw deactivation instant: the snap is a fee rule only):

| meter       | quantity                                                         |
| ----------- | ---------------------------------------------------------------- |
| `cpuHour`   | average cores used × hours                                       |
| `gpuHour`   | average GPUs used × hours                                        |
| `ramGbHour` | average bytes used ÷ 2^30 × hours                                |
| `pvGbHour`  | byte-hours ÷ 2^30, trimmed in proportion to the covered time     |
| `networkGb` | (transfer + receive bytes) ÷ 2^30, trimmed the same way          |

The unit price is the row's own PriceBook rate with the Offering's margin applied; a row with
no rate for a meter is dropped from that meter. Quantities and unit prices are exact rationals
(`Fraction`): an hour is 3600 seconds, so a trimmed hour is generally not a finite decimal,
and a `Decimal` would round silently. A charge row (hour × meter) is the exact sum of quantity
× unit price over its rows, rounded once to a whole micro, half to even.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

from finops.billing import allocation, money, sources, ticks

GIB = 2**30
MICROSECONDS_PER_HOUR = 3_600_000_000
ONE_MICROSECOND = dt.timedelta(microseconds=1)


class Meter(enum.StrEnum):
    """Meter names (the API's `MeterName` enum); `subscription` is the recurring fee."""

    SUBSCRIPTION = "subscription"
    CPU_HOUR = "cpuHour"
    GPU_HOUR = "gpuHour"
    RAM_GB_HOUR = "ramGbHour"
    PV_GB_HOUR = "pvGbHour"
    NETWORK_GB = "networkGb"


# Meters that have a usage calculator, in the order charges and breakdowns list them.
USAGE_METERS: tuple[Meter, ...] = (
    Meter.CPU_HOUR,
    Meter.GPU_HOUR,
    Meter.RAM_GB_HOUR,
    Meter.PV_GB_HOUR,
    Meter.NETWORK_GB,
)

# The PriceBook rate field that prices each usage meter.
RATE_FIELD: dict[Meter, str] = {
    Meter.CPU_HOUR: "cpuHour",
    Meter.GPU_HOUR: "gpuHour",
    Meter.RAM_GB_HOUR: "ramGbHour",
    Meter.PV_GB_HOUR: "pvGbHour",
    Meter.NETWORK_GB: "networkGiB",
}


def _optional_int(block: Mapping[str, Any], key: str) -> int | None:
    value = block.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"margins.{key} must be an integer, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class Margin:
    """A meter's `margins`: `absoluteMicros` adds per unit, `factorMilli` multiplies.

    Admission allows only one of the two, both non-negative. Should both arrive anyway, the
    factor applies first; a price driven below zero is clamped to zero (meters never credit).
    """

    absolute_micros: int | None = None
    factor_milli: int | None = None

    @classmethod
    def from_dict(cls, block: Mapping[str, Any] | None) -> Margin:
        """Build from a raw `margins` mapping (absent means no margin)."""
        if not block:
            return cls()
        return cls(_optional_int(block, "absoluteMicros"), _optional_int(block, "factorMilli"))

    def apply(self, rate_micros: int) -> Fraction:
        """The exact per-unit price, in micros, for a row whose rate is `rate_micros`."""
        price = Fraction(rate_micros)
        if self.factor_milli is not None:
            price *= Fraction(self.factor_milli, 1000)
        if self.absolute_micros is not None:
            price += self.absolute_micros
        return max(price, Fraction(0))

    def unit_price_micros(self, rate_micros: int) -> money.Micros:
        """The price for people and for `status.resolvedPricing`: whole micros, half-even."""
        return money.round_half_even(self.apply(rate_micros))


@dataclasses.dataclass(frozen=True, slots=True)
class MeterPrice:
    """One `resourcePricing` entry: a usage meter and its margin."""

    meter: Meter
    margin: Margin = Margin()


@dataclasses.dataclass(frozen=True, slots=True)
class UsagePricing:
    """An Offering's `spec.pricing.resourcePricing`, usage meters only.

    `subscription` entries are dropped: no usage calculator exists for them. When a meter is
    listed twice, the first entry wins.
    """

    meters: tuple[MeterPrice, ...] = ()

    @classmethod
    def from_offering_spec(cls, spec: Mapping[str, Any]) -> UsagePricing:
        """Build from an Offering's raw `spec`."""
        pricing = spec.get("pricing") or {}
        entries: Sequence[Mapping[str, Any]] = pricing.get("resourcePricing") or ()
        seen: dict[Meter, MeterPrice] = {}
        for entry in entries:
            try:
                meter = Meter(str(entry.get("name")))
            except ValueError:
                allowed = ", ".join(m.value for m in Meter)
                raise ValueError(
                    f"resourcePricing[].name must be one of {allowed}, got {entry.get('name')!r}"
                ) from None
            if meter is Meter.SUBSCRIPTION or meter in seen:
                continue
            seen[meter] = MeterPrice(meter, Margin.from_dict(entry.get("margins")))
        return cls(tuple(seen.values()))

    def __bool__(self) -> bool:
        return bool(self.meters)


@dataclasses.dataclass(frozen=True, slots=True)
class Rates:
    """The rates, in micros, of the PriceBook recorded against an allocation row."""

    cpu_hour: int = 0
    gpu_hour: int = 0
    ram_gb_hour: int = 0
    pv_gb_hour: int = 0
    network_gib: int = 0

    @classmethod
    def from_micros(cls, rates: Mapping[str, int]) -> Rates:
        """Build from rate-field names (`cpuHour`, `networkGiB`, ...) to micros."""
        return cls(
            cpu_hour=rates.get("cpuHour", 0),
            gpu_hour=rates.get("gpuHour", 0),
            ram_gb_hour=rates.get("ramGbHour", 0),
            pv_gb_hour=rates.get("pvGbHour", 0),
            network_gib=rates.get("networkGiB", 0),
        )

    @classmethod
    def from_pricebook_spec(cls, spec: Mapping[str, Any]) -> Rates:
        """Parse a PriceBook's raw `spec.rates` (raises `money.RateParseError`)."""
        return cls.from_micros(money.parse_rates(spec.get("rates")))

    def for_meter(self, meter: Meter) -> int:
        """The rate pricing `meter`; 0 means the book has none set."""
        return {
            Meter.CPU_HOUR: self.cpu_hour,
            Meter.GPU_HOUR: self.gpu_hour,
            Meter.RAM_GB_HOUR: self.ram_gb_hour,
            Meter.PV_GB_HOUR: self.pv_gb_hour,
            Meter.NETWORK_GB: self.network_gib,
        }.get(meter, 0)


@dataclasses.dataclass(frozen=True, slots=True)
class PricedRow:
    """An allocation row with the rates of the PriceBook it was collected under.

    `rates` is None when no PriceBook row matches; such a row is dropped from every meter.
    """

    row: allocation.AllocationRow
    rates: Rates | None


@dataclasses.dataclass(frozen=True, slots=True)
class ActiveInterval:
    """`[activatedAt, deactivatedAt)`: the part of time a Subscription's usage is billed."""

    activated_at: dt.datetime
    deactivated_at: dt.datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "activated_at", ticks.utc(self.activated_at))
        if self.deactivated_at is not None:
            object.__setattr__(self, "deactivated_at", ticks.utc(self.deactivated_at))

    def contains(self, t: dt.datetime) -> bool:
        return self.activated_at <= t and (self.deactivated_at is None or t < self.deactivated_at)

    def overlap_microseconds(self, start: dt.datetime, end: dt.datetime) -> int:
        """Length, in microseconds, of `[start, end) ∩ [activatedAt, deactivatedAt)`."""
        lo = max(ticks.utc(start), self.activated_at)
        hi = ticks.utc(end)
        if self.deactivated_at is not None:
            hi = min(hi, self.deactivated_at)
        return max(0, (hi - lo) // ONE_MICROSECOND)


@dataclasses.dataclass(frozen=True, slots=True)
class RowShare:
    """How much of a row lies in the active interval: its covered time and covered fraction."""

    hours: Fraction
    fraction: Fraction

    @classmethod
    def of(cls, row: allocation.AllocationRow, interval: ActiveInterval) -> RowShare | None:
        """None when no part of the row is inside the interval (the row is not billed)."""
        length = max(0, (ticks.utc(row.end) - ticks.utc(row.start)) // ONE_MICROSECOND)
        if length == 0:
            # An instant: all of it or nothing, and no time for the per-hour meters.
            if interval.contains(ticks.utc(row.start)):
                return cls(Fraction(0), Fraction(1))
            return None
        covered = interval.overlap_microseconds(row.start, row.end)
        if covered == 0:
            return None
        return cls(Fraction(covered, MICROSECONDS_PER_HOUR), Fraction(covered, length))


def meter_quantity(meter: Meter, row: allocation.AllocationRow, share: RowShare) -> Fraction:
    """The exact quantity of `meter` in the covered part of `row`; never negative."""
    if meter is Meter.CPU_HOUR:
        quantity = Fraction(row.cpu_core_usage_average) * share.hours
    elif meter is Meter.GPU_HOUR:
        quantity = Fraction(row.gpu_usage_average) * share.hours
    elif meter is Meter.RAM_GB_HOUR:
        quantity = Fraction(row.ram_byte_usage_average) * share.hours * Fraction(1, GIB)
    elif meter is Meter.PV_GB_HOUR:
        quantity = Fraction(row.pv_byte_hours) * share.fraction * Fraction(1, GIB)
    elif meter is Meter.NETWORK_GB:
        moved = Fraction(row.network_transfer_bytes) + Fraction(row.network_receive_bytes)
        quantity = moved * share.fraction * Fraction(1, GIB)
    else:
        raise ValueError(f"meter {meter} has no usage calculator")
    return max(quantity, Fraction(0))


@dataclasses.dataclass(frozen=True, slots=True)
class UsageCharge:
    """One charge row: a Subscription's use of one meter in one hour.

    `quantity` and `exact_amount` are exact; `amount_micros` is the single rounding of
    `exact_amount`. `rows` counts the allocation rows that contributed.
    """

    hour: dt.datetime
    meter: Meter
    quantity: Fraction
    exact_amount: Fraction
    amount_micros: money.Micros
    rows: int

    @property
    def source(self) -> str:
        """The ledger's charge source (the meter name)."""
        return self.meter.value

    def quantity_decimal(self, places: int = 12) -> Decimal:
        """The quantity for storage and display, rounded half-even to `places` decimals."""
        return money.to_decimal(self.quantity, places)

    def unit_price_micros(self) -> money.Micros:
        """Amount per unit, rounded half-even: the quantity-weighted average of the rows'
        unit prices (equal to the shared unit price when all rows have one)."""
        if self.quantity == 0:
            return money.Micros(0)
        return money.round_half_even(self.exact_amount * _reciprocal(self.quantity))


def _reciprocal(value: Fraction) -> Fraction:
    return Fraction(value.denominator, value.numerator)


@dataclasses.dataclass
class _Accumulator:
    quantity: Fraction = Fraction(0)
    amount: Fraction = Fraction(0)
    rows: int = 0


def usage_charges(
    pricing: UsagePricing,
    usage_sources: Sequence[sources.UsageSource],
    rows: Iterable[PricedRow],
    interval: ActiveInterval,
) -> list[UsageCharge]:
    """Charge rows for every (hour, meter) with at least one selected, rated row inside the
    active interval, ordered by hour then meter. A Subscription without sources, or an
    Offering without usage meters, has none."""
    if not usage_sources or not pricing:
        return []
    totals: dict[tuple[dt.datetime, Meter], _Accumulator] = {}
    for priced in rows:
        row = priced.row
        if priced.rates is None or not sources.matches_any(usage_sources, row):
            continue
        share = RowShare.of(row, interval)
        if share is None:
            continue
        for entry in pricing.meters:
            rate = priced.rates.for_meter(entry.meter)
            if rate <= 0:
                continue  # No rate for this meter: dropped, not billed at the margin alone.
            quantity = meter_quantity(entry.meter, row, share)
            acc = totals.setdefault((ticks.utc(row.hour), entry.meter), _Accumulator())
            acc.quantity += quantity
            acc.amount += quantity * entry.margin.apply(rate)
            acc.rows += 1
    order = {meter: i for i, meter in enumerate(USAGE_METERS)}
    return [
        UsageCharge(
            hour=hour,
            meter=meter,
            quantity=acc.quantity,
            exact_amount=acc.amount,
            amount_micros=money.round_half_even(acc.amount),
            rows=acc.rows,
        )
        for (hour, meter), acc in sorted(totals.items(), key=lambda kv: (kv[0][0], order[kv[0][1]]))
    ]
