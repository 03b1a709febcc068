"""The integer fast path of the usage meters gives exactly what per-row `Fraction`s give.

The oracle below is the straightforward implementation the fast path replaced: every row's
quantity and amount as exact rationals, summed, rounded once. Random rows cover trimmed and
instant rows, negative and many-digit decimals, missing rates, several hours and sources,
both kinds of margin and deactivation mid-hour.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Sequence
from decimal import Decimal
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.oracle import usage as oracle_usage

from finops.api import models
from finops.billing import allocation, money, sources, ticks, usage

UTC = dt.UTC
H0 = dt.datetime(2026, 4, 1, 0, tzinfo=UTC)


@dataclasses.dataclass
class _Exact:
    quantity: Fraction = Fraction(0)
    amount: Fraction = Fraction(0)
    rows: int = 0


def oracle(
    pricing: usage.UsagePricing,
    usage_sources: Sequence[sources.SourceFilter],
    rows: Iterable[oracle_usage.PricedRow],
    interval: usage.ActiveInterval,
) -> list[tuple[dt.datetime, models.MeterName, Fraction, Fraction, int, int, Decimal, int]]:
    """Per (hour, meter): quantity, amount, rounded amount, rows, stored quantity, unit
    price, all through `Fraction` and the `money` helpers."""
    if not usage_sources or not pricing:
        return []
    totals: dict[tuple[dt.datetime, models.MeterName], _Exact] = {}
    for priced in rows:
        row = priced.row
        if priced.rates is None or not oracle_usage.matches_any(usage_sources, row):
            continue
        share = oracle_usage.RowShare.of(row, interval)
        if share is None:
            continue
        for entry in pricing.meters:
            rate = priced.rates.for_meter(entry.meter)
            if rate <= 0:
                continue
            quantity = oracle_usage.meter_quantity(entry.meter, row, share)
            acc = totals.setdefault((ticks.utc(row.hour), entry.meter), _Exact())
            acc.quantity += quantity
            acc.amount += quantity * entry.margin.apply(rate)
            acc.rows += 1
    order = {meter: i for i, meter in enumerate(usage.USAGE_METERS)}
    out = []
    for (hour, meter), acc in sorted(totals.items(), key=lambda kv: (kv[0][0], order[kv[0][1]])):
        unit = (
            0
            if acc.quantity == 0
            else money.round_half_even(
                acc.amount * Fraction(acc.quantity.denominator, acc.quantity.numerator)
            )
        )
        out.append(
            (
                hour,
                meter,
                acc.quantity,
                acc.amount,
                money.round_half_even(acc.amount),
                acc.rows,
                money.to_decimal(acc.quantity, 12),
                unit,
            )
        )
    return out


def fast(
    pricing: usage.UsagePricing,
    usage_sources: Sequence[sources.SourceFilter],
    rows: Iterable[oracle_usage.PricedRow],
    interval: usage.ActiveInterval,
) -> list[tuple[dt.datetime, models.MeterName, Fraction, Fraction, int, int, Decimal, int]]:
    return [
        (
            c.hour,
            c.meter,
            c.quantity,
            c.exact_amount,
            c.amount_micros,
            c.rows,
            c.quantity_decimal(12),
            c.unit_price_micros(),
        )
        for c in oracle_usage.usage_charges(pricing, usage_sources, rows, interval)
    ]


def decimals() -> st.SearchStrategy[Decimal]:
    """Numeric values as PostgreSQL returns them: any sign, up to 20 decimals."""
    return st.builds(
        lambda digits, places: Decimal(digits).scaleb(-places),
        st.integers(-(10**15), 10**18),
        st.integers(0, 20),
    )


def minutes() -> st.SearchStrategy[dt.timedelta]:
    return st.builds(
        lambda m, us: dt.timedelta(minutes=m, microseconds=us),
        st.integers(0, 60),
        st.sampled_from([0, 0, 1, 333_333]),
    )


@st.composite
def allocation_rows(draw: st.DrawFn) -> oracle_usage.PricedRow:
    hour = H0 + dt.timedelta(hours=draw(st.integers(0, 3)))
    start = hour + draw(minutes())
    end = start + draw(minutes())
    row = allocation.AllocationRow(
        cluster="c",
        name="n",
        namespace=draw(st.sampled_from(["a", "b"])),
        aggregation="namespace,pod",
        hour=hour,
        start=start,
        end=min(end, hour + dt.timedelta(hours=1)),
        controller_kind="deployment",
        controller_name=draw(st.sampled_from(["web", "db"])),
        pod="p",
        cpu_core_usage_average=draw(decimals()),
        gpu_usage_average=draw(decimals()),
        ram_byte_usage_average=draw(decimals()),
        pv_byte_hours=draw(decimals()),
        network_transfer_bytes=draw(decimals()),
        network_receive_bytes=draw(decimals()),
    )
    rate = st.sampled_from([0, 1, 31_000, 4_000, 123_457])
    rates = draw(
        st.one_of(
            st.none(),
            st.builds(usage.Rates, rate, rate, rate, rate, rate),
        )
    )
    return oracle_usage.PricedRow(row, rates)


margins = st.one_of(
    st.just(usage.Margin()),
    st.builds(usage.Margin, factor_milli=st.integers(0, 3000)),
    st.builds(usage.Margin, absolute_micros=st.integers(0, 10_000)),
    st.builds(usage.Margin, st.integers(0, 10_000), st.integers(0, 3000)),
)
pricings = st.builds(
    lambda meters, ms: usage.UsagePricing(
        tuple(usage.MeterPrice(m, margin) for m, margin in zip(meters, ms, strict=False))
    ),
    st.lists(st.sampled_from(usage.USAGE_METERS), unique=True, min_size=1),
    st.lists(margins, min_size=5, max_size=5),
)
source_sets = st.sampled_from(
    [
        (sources.SourceFilter(namespace="a"),),
        (sources.SourceFilter(namespace="a"), sources.SourceFilter(namespace="b")),
        (sources.SourceFilter(resource_type="Deployment", name="web"),),
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(allocation_rows(), max_size=30),
    pricing=pricings,
    selected=source_sets,
    activated=st.builds(lambda m: H0 + dt.timedelta(minutes=m), st.integers(-60, 200)),
    lasts=st.one_of(st.none(), st.builds(lambda m: dt.timedelta(minutes=m), st.integers(0, 300))),
)
def test_the_fast_path_equals_per_row_fractions_to_the_last_digit(
    rows: list[oracle_usage.PricedRow],
    pricing: usage.UsagePricing,
    selected: tuple[sources.SourceFilter, ...],
    activated: dt.datetime,
    lasts: dt.timedelta | None,
) -> None:
    interval = usage.ActiveInterval(activated, None if lasts is None else activated + lasts)
    assert fast(pricing, selected, rows, interval) == oracle(pricing, selected, rows, interval)


def test_an_instant_row_bills_its_whole_volume_but_no_time() -> None:
    instant = allocation.AllocationRow(
        cluster="c",
        name="n",
        namespace="a",
        aggregation="namespace",
        hour=H0,
        start=H0 + dt.timedelta(minutes=5),
        end=H0 + dt.timedelta(minutes=5),
        cpu_core_usage_average=Decimal("2.5"),
        pv_byte_hours=Decimal(2**31),
    )
    rows = [oracle_usage.PricedRow(instant, usage.Rates(cpu_hour=10, pv_gb_hour=7))]
    pricing = usage.UsagePricing(
        (usage.MeterPrice(models.MeterName.CPU_HOUR), usage.MeterPrice(models.MeterName.PV_GB_HOUR))
    )
    selected = (sources.SourceFilter(namespace="a"),)
    interval = usage.ActiveInterval(H0)
    result = fast(pricing, selected, rows, interval)
    assert result == oracle(pricing, selected, rows, interval)
    assert [(r[1], r[2]) for r in result] == [
        (models.MeterName.CPU_HOUR, Fraction(0)),
        (models.MeterName.PV_GB_HOUR, Fraction(2)),
    ]
