"""Throughput of the exact usage oracle, the hourly fees and the cost buckets.

Why: the charge run sums usage in SQL, but the property tests price every generated row with
the exact Python oracle (`tests/oracle/usage.py`), and the fee schedules and buckets run in
every charge run; this says what they cost, so a slowdown shows before it shows in a test run
or a job. Absolute rates measure the machine, so each is printed beside
a baseline timed in the same run: bare `Decimal` arithmetic over the same rows (quantity ×
rate for the five meters, summed per namespace: no active interval, no usage-source match, no
margin, no rounding) and a bare loop over the same Subscription-hours (one datetime addition
and one price per hour). The ratio is what exactness and the fee rules cost on top. Each runs
at three sizes (`--scales`) and prints the cost per row / per Subscription-hour.

    .venv/bin/python -m benchmarks.billing_charges [--rows N] [--subscriptions N] [--scales 1,2,4]
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from collections.abc import Callable
from decimal import Decimal

from tests.oracle import usage as oracle_usage

from finops.billing import allocation, buckets, fees, sources, usage

START = dt.datetime(2026, 4, 1, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)


def priced_rows(count: int) -> list[oracle_usage.PricedRow]:
    """`count` rows over one day, in 50 namespaces, with OpenCost-like five-decimal numbers."""
    rates = usage.Rates.from_pricebook_spec(
        {"currency": "USD", "valuationMode": "currency",
         "rates": {"cpuHour": "0.031", "ramGbHour": "0.004", "pvGbHour": "0.00012",
                   "gpuHour": "1.8", "networkGiB": "0.09"}}
    )  # fmt: skip
    rows = []
    for i in range(count):
        hour = START + HOUR * (i % 24)
        rows.append(
            oracle_usage.PricedRow(
                allocation.AllocationRow(
                    cluster="c",
                    name=f"ns-{i % 50}/pod-{i}",
                    namespace=f"ns-{i % 50}",
                    aggregation="namespace,pod,container",
                    hour=hour,
                    start=hour + dt.timedelta(seconds=i % 600),
                    end=hour + HOUR - dt.timedelta(seconds=i % 7),
                    cpu_core_usage_average=Decimal(f"0.{i % 99991:05d}"),
                    ram_byte_usage_average=Decimal(f"{104857600 + i}.33333"),
                    pv_byte_hours=Decimal(f"{i * 1024}.41446"),
                    network_transfer_bytes=Decimal(i * 17),
                    network_receive_bytes=Decimal(i * 31),
                ),
                rates,
            )
        )
    return rows


def best_of(repeat: int, work: Callable[[], object]) -> float:
    timings = []
    for _ in range(repeat):
        began = time.perf_counter()
        work()
        timings.append(time.perf_counter() - began)
    return min(timings)


RATES = {
    "cpu": Decimal("0.031"),
    "ram": Decimal("0.004"),
    "pv": Decimal("0.00012"),
    "net": Decimal("0.09"),
}
GIB = Decimal(1024**3)


def bare_sums(rows: list[oracle_usage.PricedRow]) -> dict[str, Decimal]:
    """The baseline: quantity × rate per meter, summed per namespace, nothing else."""
    totals: dict[str, Decimal] = {}
    for priced in rows:
        row = priced.row
        amount = (
            row.cpu_core_usage_average * RATES["cpu"]
            + row.ram_byte_usage_average / GIB * RATES["ram"]
            + row.pv_byte_hours / GIB * RATES["pv"]
            + (row.network_transfer_bytes + row.network_receive_bytes) / GIB * RATES["net"]
        )
        totals[row.namespace] = totals.get(row.namespace, Decimal(0)) + amount
    return totals


def bare_hours(starts: list[dt.datetime], end: dt.datetime) -> int:
    """The baseline: one datetime addition and one price per Subscription-hour."""
    total = 0
    for start in starts:
        hour = start.replace(minute=0, second=0, microsecond=0)
        while hour < end:
            total += 40_000_000
            hour += HOUR
    return total


def run(rows_count: int, subscriptions: int, repeat: int) -> tuple[float, float, float, float]:
    """µs per row (product, baseline) and µs per Subscription-hour (product, baseline)."""
    rows = priced_rows(rows_count)
    pricing = usage.UsagePricing(tuple(usage.MeterPrice(m) for m in usage.USAGE_METERS))
    everyone = [sources.SourceFilter(namespace=f"ns-{n}") for n in range(50)]
    interval = usage.ActiveInterval(START + dt.timedelta(minutes=5))
    priced = best_of(repeat, lambda: oracle_usage.usage_charges(pricing, everyone, rows, interval))
    bare = best_of(repeat, lambda: bare_sums(rows))
    print(f"  usage charges: {rows_count:,} rows x 5 meters in {priced:.3f} s "
          f"({rows_count / priced:,.0f} rows/s); bare Decimal sums {bare:.3f} s; "
          f"ratio {priced / bare:.2f}")  # fmt: skip

    spec = fees.FeeSpec.from_fee_block(
        {"priceMicros": 40_000_000, "tickAlignment": "HourBoundary", "period": "1"}
    )
    starts = [START + dt.timedelta(minutes=7 * i) for i in range(subscriptions)]
    schedules = [spec.schedule(start) for start in starts]
    month_end = START + HOUR * 24 * 30

    def walk_month() -> None:
        for schedule in schedules:
            schedule.hourly(START, month_end)

    walked = best_of(repeat, walk_month)
    looped = best_of(repeat, lambda: bare_hours(starts, month_end))
    hours = subscriptions * 24 * 30
    print(f"  hourly fees: {hours:,} Subscription-hours in {walked:.3f} s "
          f"({hours / walked:,.0f} /s); bare hour loop {looped:.3f} s; "
          f"ratio {walked / looped:.2f}")  # fmt: skip

    built = best_of(
        repeat, lambda: [buckets.build(month_end - HOUR, schedule) for schedule in schedules]
    )
    print(f"  cost buckets: {subscriptions:,} Subscriptions in {built:.3f} s "
          f"({1e6 * built / subscriptions:.1f} µs each)")  # fmt: skip
    return (
        1e6 * priced / rows_count,
        1e6 * bare / rows_count,
        1e6 * walked / hours,
        (1e6 * looped / hours),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000, help="rows at ×1")
    parser.add_argument("--subscriptions", type=int, default=200, help="Subscriptions at ×1")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scales", default="1,2,4")
    args = parser.parse_args()
    scales = [int(s) for s in args.scales.split(",")]
    per: list[tuple[int, tuple[float, float, float, float]]] = []
    for scale in scales:
        print(f"×{scale}:")
        per.append((scale, run(args.rows * scale, args.subscriptions * scale, args.repeat)))
    print("growth (µs per row, per Subscription-hour; product / baseline):")
    for scale, (row, bare_row, hour, bare_hour) in per:
        print(f"  ×{scale}: usage {row:6.2f} / {bare_row:6.2f} µs per row, "
              f"fees {hour:5.2f} / {bare_hour:5.2f} µs per Subscription-hour")  # fmt: skip


if __name__ == "__main__":
    main()
