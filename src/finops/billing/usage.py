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
× unit price over its rows, rounded once to a whole micro, half to even. The sums are kept
as whole numbers over a fixed denominator per meter (`_Sum`), not as a `Fraction` per row:
the same exact values at a fraction of the cost.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

from finops.api import bodies, models
from finops.billing import allocation, money, sources, ticks

GIB = 2**30
MICROSECONDS_PER_HOUR = 3_600_000_000
ONE_MICROSECOND = dt.timedelta(microseconds=1)


Meter = models.MeterName
"""Meter names (the API's `MeterName`); `subscription` is the recurring fee."""


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
    def from_dict(cls, block: bodies.Margins | None) -> Margin:
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
    def from_offering_spec(cls, spec: bodies.OfferingSpec) -> UsagePricing:
        """Build from an Offering's raw `spec`."""
        pricing = spec.get("pricing") or {}
        entries: Sequence[bodies.Meter] = pricing.get("resourcePricing") or ()
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
    def from_pricebook_spec(cls, spec: bodies.PriceBookSpec) -> Rates:
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
    pricebook_id: int | None = None
    """The ledger's id of that PriceBook's rates (recorded on the charge rows it prices)."""


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
        """The quantity for storage and display, rounded half-even to `places` decimals
        (what `money.to_decimal` gives, in integers: this runs once per charge row)."""
        q = self.quantity
        scaled = _half_even(q.numerator * 10**places, q.denominator)
        # Parsed from text, which no decimal context rounds.
        return Decimal(f"{scaled}E-{places}")

    def unit_price_micros(self) -> money.Micros:
        """Amount per unit, rounded half-even: the quantity-weighted average of the rows'
        unit prices (equal to the shared unit price when all rows have one)."""
        q = self.quantity
        if q == 0:
            return money.Micros(0)
        a = self.exact_amount
        numerator, denominator = a.numerator * q.denominator, a.denominator * q.numerator
        if denominator < 0:
            numerator, denominator = -numerator, -denominator
        return money.Micros(_half_even(numerator, denominator))


def _half_even(numerator: int, denominator: int) -> int:
    """`money.round_half_even(Fraction(numerator, denominator))` for a positive denominator,
    without reducing the fraction first (the rounding does not need it)."""
    floor, rest = divmod(numerator, denominator)
    twice = 2 * rest
    if twice > denominator or (twice == denominator and floor % 2 == 1):
        floor += 1
    return floor


# The fixed denominator of each meter's quantity, in units of the row's decimal value:
# per-hour meters count covered microseconds, the others count whole rows (a trimmed row of
# theirs takes the exact `Fraction` path instead).
_DENOMINATOR: dict[Meter, int] = {
    Meter.CPU_HOUR: MICROSECONDS_PER_HOUR,
    Meter.GPU_HOUR: MICROSECONDS_PER_HOUR,
    Meter.RAM_GB_HOUR: MICROSECONDS_PER_HOUR * GIB,
    Meter.PV_GB_HOUR: GIB,
    Meter.NETWORK_GB: GIB,
}

_RATE_ATTRIBUTE: dict[Meter, str] = {
    Meter.CPU_HOUR: "cpu_hour",
    Meter.GPU_HOUR: "gpu_hour",
    Meter.RAM_GB_HOUR: "ram_gb_hour",
    Meter.PV_GB_HOUR: "pv_gb_hour",
    Meter.NETWORK_GB: "network_gib",
}


def _price_milli(margin: Margin, rate_micros: int) -> int:
    """`margin.apply(rate_micros)` × 1000, a whole number: the factor is in thousandths."""
    price = rate_micros * (1000 if margin.factor_milli is None else margin.factor_milli)
    if margin.absolute_micros is not None:
        price += margin.absolute_micros * 1000
    return max(price, 0)


def _only_twos_and_fives(denominator: int) -> bool:
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    return denominator == 1


_NO_FRACTION = Fraction(0)  # Shared: a Fraction is immutable, `+=` rebinds.


class _Sum:
    """One charge row's exact sums as whole numbers over a fixed denominator.

    Why not `Fraction` per row: every row's decimal quantity is a multiple of 1/`scale` (a
    power of ten, grown as rows need it) and its time is whole microseconds, so
    `quantity × scale × denominator` and `amount × scale × denominator × 1000` are integers
    that only ever add; one division per charge row turns them back into exact rationals.
    Values that are not finite decimals, and trimmed rows of the per-row meters, go to the
    exact `Fraction` remainder.
    """

    __slots__ = ("amount", "extra_amount", "extra_quantity", "quantity", "rows", "scale")

    def __init__(self) -> None:
        self.scale = 1
        self.quantity = 0
        self.amount = 0
        self.rows = 0
        self.extra_quantity: Fraction | None = None
        self.extra_amount = _NO_FRACTION

    def multiplier(self, denominator: int) -> int | None:
        """`scale // denominator`, growing `scale` first; None when no power of ten fits."""
        if self.scale % denominator:
            if not _only_twos_and_fives(denominator):
                return None
            while self.scale % denominator:
                self.scale *= 10
                self.quantity *= 10
                self.amount *= 10
        return self.scale // denominator

    def add_exact(self, quantity: Fraction, price_milli: int) -> None:
        if self.extra_quantity is None:
            self.extra_quantity = Fraction(0)
        self.extra_quantity += quantity
        self.extra_amount += quantity * Fraction(price_milli, 1000)

    def totals(self, denominator: int) -> tuple[Fraction, Fraction]:
        """The exact quantity and amount."""
        whole = self.scale * denominator
        quantity = Fraction(self.quantity, whole)
        amount = Fraction(self.amount, whole * 1000)
        if self.extra_quantity is not None:
            return quantity + self.extra_quantity, amount + self.extra_amount
        return quantity, amount


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo is dt.UTC else ticks.utc(t)


def _coverage(row: allocation.AllocationRow, interval: ActiveInterval) -> tuple[int, int] | None:
    """`(covered, length)` in microseconds, as `RowShare.of` measures them; an instant inside
    the interval is `(0, 0)`; None when the row is not billed."""
    start = _aware(row.start)
    end = _aware(row.end)
    length = max(0, (end - start) // ONE_MICROSECOND)
    lo = start if start > interval.activated_at else interval.activated_at
    if length == 0:
        return (0, 0) if interval.contains(start) else None
    hi = end
    if interval.deactivated_at is not None and interval.deactivated_at < hi:
        hi = interval.deactivated_at
    covered = max(0, (hi - lo) // ONE_MICROSECOND)
    return None if covered == 0 else (covered, length)


def _add(acc: _Sum, value: Decimal, weight: int, price_milli: int) -> bool:
    """Add `max(value, 0) × weight` on the integer path; False when `value` is not a finite
    decimal (the caller takes the exact path)."""
    numerator, denominator = value.as_integer_ratio()
    multiplier = acc.multiplier(denominator)
    if multiplier is None:
        return False
    if numerator > 0 and weight:
        scaled = numerator * multiplier * weight
        acc.quantity += scaled
        acc.amount += scaled * price_milli
    return True


def _add_network(acc: _Sum, row: allocation.AllocationRow, price_milli: int) -> bool:
    sent_n, sent_d = row.network_transfer_bytes.as_integer_ratio()
    received_n, received_d = row.network_receive_bytes.as_integer_ratio()
    if acc.multiplier(sent_d) is None or acc.multiplier(received_d) is None:
        return False
    scale = acc.scale
    moved = sent_n * (scale // sent_d) + received_n * (scale // received_d)
    if moved > 0:
        acc.quantity += moved
        acc.amount += moved * price_milli
    return True


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
    plan = [(e.meter, _RATE_ATTRIBUTE[e.meter], e.margin) for e in pricing.meters]
    prices: dict[tuple[Meter, int], int] = {}
    totals: dict[tuple[dt.datetime, Meter], _Sum] = {}
    single = usage_sources[0] if len(usage_sources) == 1 else None
    for priced in rows:
        rates = priced.rates
        if rates is None:
            continue
        row = priced.row
        if single is not None:
            if not single.matches(row):
                continue
        elif not sources.matches_any(usage_sources, row):
            continue
        coverage = _coverage(row, interval)
        if coverage is None:
            continue
        hour = _aware(row.hour)
        for meter, attribute, margin in plan:
            rate: int = getattr(rates, attribute)
            if rate <= 0:
                continue  # No rate for this meter: dropped, not billed at the margin alone.
            price = prices.get((meter, rate))
            if price is None:
                price = prices[(meter, rate)] = _price_milli(margin, rate)
            key = (hour, meter)
            acc = totals.get(key)
            if acc is None:
                acc = totals[key] = _Sum()
            acc.rows += 1
            if not _add_meter(acc, meter, row, coverage, price):
                share = RowShare.of(row, interval)
                assert share is not None  # _coverage found the row inside the interval.
                acc.add_exact(meter_quantity(meter, row, share), price)
    return _charges(totals)


def _add_meter(
    acc: _Sum, meter: Meter, row: allocation.AllocationRow, coverage: tuple[int, int], price: int
) -> bool:
    """Add the row's use of `meter` in integers; False when only exact arithmetic can."""
    covered, length = coverage
    if meter is Meter.CPU_HOUR:
        return _add(acc, row.cpu_core_usage_average, covered, price)
    if meter is Meter.RAM_GB_HOUR:
        return _add(acc, row.ram_byte_usage_average, covered, price)
    if meter is Meter.GPU_HOUR:
        return _add(acc, row.gpu_usage_average, covered, price)
    if covered != length:
        return False  # A trimmed row of a per-row meter: its share is not a decimal.
    if meter is Meter.PV_GB_HOUR:
        return _add(acc, row.pv_byte_hours, 1, price)
    return _add_network(acc, row, price)


def _charges(totals: Mapping[tuple[dt.datetime, Meter], _Sum]) -> list[UsageCharge]:
    """One charge per (hour, meter) sum, ordered by hour then meter, rounded once."""
    order = {meter: i for i, meter in enumerate(USAGE_METERS)}
    charges = []
    for (hour, meter), acc in sorted(totals.items(), key=lambda kv: (kv[0][0], order[kv[0][1]])):
        quantity, amount = acc.totals(_DENOMINATOR[meter])
        charges.append(
            UsageCharge(
                hour=hour,
                meter=meter,
                quantity=quantity,
                exact_amount=amount,
                amount_micros=money.Micros(_half_even(amount.numerator, amount.denominator)),
                rows=acc.rows,
            )
        )
    return charges
