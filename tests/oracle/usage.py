"""The usage meters read as exactly as possible in Python: the oracle the ledger's set-based
charge run (`finops.store.charge_sql`) is proven against.

Every rule is the one `finops.billing.usage` documents: a row's covered part of the active
interval, each meter's own signal, the PriceBook rate with the Offering's margin, one
half-even rounding per (hour, meter). Sums are kept as whole numbers over a fixed denominator
per meter (`_Sum`) so property tests can run thousands of rows; `tests/unit/billing/
test_billing_usage_fast_path.py` checks them against a `Fraction` per row.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from fractions import Fraction

from finops.api import models
from finops.billing import allocation, money, sources, ticks, usage


@dataclasses.dataclass(frozen=True, slots=True)
class PricedRow:
    """An allocation row with the rates of the PriceBook it was collected under.

    `rates` is None when no PriceBook row matches; such a row is dropped from every meter.
    """

    row: allocation.AllocationRow
    rates: usage.Rates | None
    pricebook_id: int | None = None
    """The ledger's id of that PriceBook's rates (recorded on the charge rows it prices)."""


def matches_any(
    usage_sources: Iterable[sources.SourceFilter], row: allocation.AllocationRow
) -> bool:
    """True when at least one entry selects the row (entries add, OR)."""
    return any(source.matches(row) for source in usage_sources)


def select(
    usage_sources: Sequence[sources.SourceFilter], rows: Iterable[allocation.AllocationRow]
) -> list[allocation.AllocationRow]:
    """The rows the sources select, each once however many entries match it, in input order."""
    return [row for row in rows if matches_any(usage_sources, row)]


@dataclasses.dataclass(frozen=True, slots=True)
class RowShare:
    """How much of a row lies in the active interval: its covered time and covered fraction."""

    hours: Fraction
    fraction: Fraction

    @classmethod
    def of(cls, row: allocation.AllocationRow, interval: usage.ActiveInterval) -> RowShare | None:
        """None when no part of the row is inside the interval (the row is not billed)."""
        length = max(0, (ticks.utc(row.end) - ticks.utc(row.start)) // usage.ONE_MICROSECOND)
        if length == 0:
            # An instant: all of it or nothing, and no time for the per-hour meters.
            if interval.contains(ticks.utc(row.start)):
                return cls(Fraction(0), Fraction(1))
            return None
        covered = interval.overlap_microseconds(row.start, row.end)
        if covered == 0:
            return None
        return cls(Fraction(covered, usage.MICROSECONDS_PER_HOUR), Fraction(covered, length))


def meter_quantity(
    meter: models.MeterName, row: allocation.AllocationRow, share: RowShare
) -> Fraction:
    """The exact quantity of `meter` in the covered part of `row`; never negative."""
    if meter is models.MeterName.CPU_HOUR:
        quantity = Fraction(row.cpu_core_usage_average) * share.hours
    elif meter is models.MeterName.GPU_HOUR:
        quantity = Fraction(row.gpu_usage_average) * share.hours
    elif meter is models.MeterName.RAM_GB_HOUR:
        quantity = Fraction(row.ram_byte_usage_average) * share.hours * Fraction(1, usage.GIB)
    elif meter is models.MeterName.PV_GB_HOUR:
        quantity = Fraction(row.pv_byte_hours) * share.fraction * Fraction(1, usage.GIB)
    elif meter is models.MeterName.NETWORK_GB:
        moved = Fraction(row.network_transfer_bytes) + Fraction(row.network_receive_bytes)
        quantity = moved * share.fraction * Fraction(1, usage.GIB)
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
    meter: models.MeterName
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
_DENOMINATOR: dict[models.MeterName, int] = {
    models.MeterName.CPU_HOUR: usage.MICROSECONDS_PER_HOUR,
    models.MeterName.GPU_HOUR: usage.MICROSECONDS_PER_HOUR,
    models.MeterName.RAM_GB_HOUR: usage.MICROSECONDS_PER_HOUR * usage.GIB,
    models.MeterName.PV_GB_HOUR: usage.GIB,
    models.MeterName.NETWORK_GB: usage.GIB,
}

_RATE_ATTRIBUTE: dict[models.MeterName, str] = {
    models.MeterName.CPU_HOUR: "cpu_hour",
    models.MeterName.GPU_HOUR: "gpu_hour",
    models.MeterName.RAM_GB_HOUR: "ram_gb_hour",
    models.MeterName.PV_GB_HOUR: "pv_gb_hour",
    models.MeterName.NETWORK_GB: "network_gib",
}


def _price_milli(margin: usage.Margin, rate_micros: int) -> int:
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


def _coverage(
    row: allocation.AllocationRow, interval: usage.ActiveInterval
) -> tuple[int, int] | None:
    """`(covered, length)` in microseconds, as `RowShare.of` measures them; an instant inside
    the interval is `(0, 0)`; None when the row is not billed."""
    start = _aware(row.start)
    end = _aware(row.end)
    length = max(0, (end - start) // usage.ONE_MICROSECOND)
    lo = start if start > interval.activated_at else interval.activated_at
    if length == 0:
        return (0, 0) if interval.contains(start) else None
    hi = end
    if interval.deactivated_at is not None and interval.deactivated_at < hi:
        hi = interval.deactivated_at
    covered = max(0, (hi - lo) // usage.ONE_MICROSECOND)
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
    pricing: usage.UsagePricing,
    usage_sources: Sequence[sources.SourceFilter],
    rows: Iterable[PricedRow],
    interval: usage.ActiveInterval,
) -> list[UsageCharge]:
    """Charge rows for every (hour, meter) with at least one selected, rated row inside the
    active interval, ordered by hour then meter. A Subscription without sources, or an
    Offering without usage meters, has none."""
    if not usage_sources or not pricing:
        return []
    plan = [(e.meter, _RATE_ATTRIBUTE[e.meter], e.margin) for e in pricing.meters]
    prices: dict[tuple[models.MeterName, int], int] = {}
    totals: dict[tuple[dt.datetime, models.MeterName], _Sum] = {}
    single = usage_sources[0] if len(usage_sources) == 1 else None
    for priced in rows:
        rates = priced.rates
        if rates is None:
            continue
        row = priced.row
        if single is not None:
            if not single.matches(row):
                continue
        elif not matches_any(usage_sources, row):
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
    acc: _Sum,
    meter: models.MeterName,
    row: allocation.AllocationRow,
    coverage: tuple[int, int],
    price: int,
) -> bool:
    """Add the row's use of `meter` in integers; False when only exact arithmetic can."""
    covered, length = coverage
    if meter is models.MeterName.CPU_HOUR:
        return _add(acc, row.cpu_core_usage_average, covered, price)
    if meter is models.MeterName.RAM_GB_HOUR:
        return _add(acc, row.ram_byte_usage_average, covered, price)
    if meter is models.MeterName.GPU_HOUR:
        return _add(acc, row.gpu_usage_average, covered, price)
    if covered != length:
        return False  # A trimmed row of a per-row meter: its share is not a decimal.
    if meter is models.MeterName.PV_GB_HOUR:
        return _add(acc, row.pv_byte_hours, 1, price)
    return _add_network(acc, row, price)


def _charges(totals: Mapping[tuple[dt.datetime, models.MeterName], _Sum]) -> list[UsageCharge]:
    """One charge per (hour, meter) sum, ordered by hour then meter, rounded once."""
    order = {meter: i for i, meter in enumerate(usage.USAGE_METERS)}
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
