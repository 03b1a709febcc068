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
× unit price over its rows, rounded once to a whole micro, half to even. The charge run sums
them in the ledger (`finops.store.charge_sql`); `tests/oracle/usage.py` reads the same rules
in Python and the property tests hold the two equal.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from finops.api import bodies, models
from finops.billing import money, ticks

GIB = 2**30
MICROSECONDS_PER_HOUR = 3_600_000_000
ONE_MICROSECOND = dt.timedelta(microseconds=1)


# Meters that have a usage calculator, in the order charges and breakdowns list them.
USAGE_METERS: tuple[models.MeterName, ...] = (
    models.MeterName.CPU_HOUR,
    models.MeterName.GPU_HOUR,
    models.MeterName.RAM_GB_HOUR,
    models.MeterName.PV_GB_HOUR,
    models.MeterName.NETWORK_GB,
)

# The PriceBook rate field that prices each usage meter.
RATE_FIELD: dict[models.MeterName, str] = {
    models.MeterName.CPU_HOUR: "cpuHour",
    models.MeterName.GPU_HOUR: "gpuHour",
    models.MeterName.RAM_GB_HOUR: "ramGbHour",
    models.MeterName.PV_GB_HOUR: "pvGbHour",
    models.MeterName.NETWORK_GB: "networkGiB",
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
    def from_dict(cls, block: bodies.MarginsBody | None) -> Margin:
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

    meter: models.MeterName
    margin: Margin = Margin()


@dataclasses.dataclass(frozen=True, slots=True)
class UsagePricing:
    """An Offering's `spec.pricing.resourcePricing`, usage meters only.

    `subscription` entries are dropped: no usage calculator exists for them. When a meter is
    listed twice, the first entry wins.
    """

    meters: tuple[MeterPrice, ...] = ()

    @classmethod
    def from_offering_spec(cls, spec: bodies.OfferingSpecBody) -> UsagePricing:
        """Build from an Offering's raw `spec`."""
        pricing = spec.get("pricing") or {}
        entries: Sequence[bodies.MeterBody] = pricing.get("resourcePricing") or ()
        seen: dict[models.MeterName, MeterPrice] = {}
        for entry in entries:
            try:
                meter = models.MeterName(str(entry.get("name")))
            except ValueError:
                allowed = ", ".join(m.value for m in models.MeterName)
                raise ValueError(
                    f"resourcePricing[].name must be one of {allowed}, got {entry.get('name')!r}"
                ) from None
            if meter is models.MeterName.SUBSCRIPTION or meter in seen:
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
    def from_pricebook_spec(cls, spec: bodies.PriceBookSpecBody) -> Rates:
        """Parse a PriceBook's raw `spec.rates` (raises `money.RateParseError`)."""
        return cls.from_micros(money.parse_rates(spec.get("rates")))

    def for_meter(self, meter: models.MeterName) -> int:
        """The rate pricing `meter`; 0 means the book has none set."""
        return {
            models.MeterName.CPU_HOUR: self.cpu_hour,
            models.MeterName.GPU_HOUR: self.gpu_hour,
            models.MeterName.RAM_GB_HOUR: self.ram_gb_hour,
            models.MeterName.PV_GB_HOUR: self.pv_gb_hour,
            models.MeterName.NETWORK_GB: self.network_gib,
        }.get(meter, 0)


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
