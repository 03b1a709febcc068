"""Throughput of the pure billing core: usage charges, hourly fees and cost buckets.

Why: the collection job prices every selected allocation row with exact rationals and walks
every Subscription hour by hour; this says how many rows and Subscription-hours a second
that costs on this machine, so a slowdown in `finops.billing` shows before it shows in a job.

    .venv/bin/python -m benchmarks.billing_charges [--rows N] [--subscriptions N]
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from collections.abc import Callable
from decimal import Decimal

from finops.billing import allocation, buckets, fees, sources, usage

START = dt.datetime(2026, 4, 1, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)


def priced_rows(count: int) -> list[usage.PricedRow]:
    """`count` rows over one day, in 50 namespaces, with OpenCost-like five-decimal numbers."""
    rates = usage.Rates.from_pricebook_spec(
        {"rates": {"cpuHour": "0.031", "ramGbHour": "0.004", "pvGbHour": "0.00012",
                   "gpuHour": "1.8", "networkGiB": "0.09"}}
    )  # fmt: skip
    rows = []
    for i in range(count):
        hour = START + HOUR * (i % 24)
        rows.append(
            usage.PricedRow(
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--subscriptions", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    rows = priced_rows(args.rows)
    pricing = usage.UsagePricing(tuple(usage.MeterPrice(m) for m in usage.USAGE_METERS))
    everyone = [sources.UsageSource(namespace=f"ns-{n}") for n in range(50)]
    interval = usage.ActiveInterval(START + dt.timedelta(minutes=5))
    seconds = best_of(args.repeat, lambda: usage.usage_charges(pricing, everyone, rows, interval))
    print(f"usage charges: {args.rows} rows x 5 meters in {seconds:.3f}s "
          f"({args.rows // max(seconds, 1e-9):,.0f} rows/s)")  # fmt: skip

    spec = fees.FeeSpec.from_fee_block(
        {"priceMicros": 40_000_000, "tickAlignment": "HourBoundary", "period": "1"}
    )
    schedules = [
        spec.schedule(START + dt.timedelta(minutes=7 * i)) for i in range(args.subscriptions)
    ]
    month_end = START + HOUR * 24 * 30

    def walk_month() -> None:
        for schedule in schedules:
            schedule.hourly(START, month_end)

    seconds = best_of(args.repeat, walk_month)
    hours = args.subscriptions * 24 * 30
    print(f"hourly fees: {hours} subscription-hours in {seconds:.3f}s "
          f"({hours // max(seconds, 1e-9):,.0f} /s)")  # fmt: skip

    seconds = best_of(
        args.repeat,
        lambda: [buckets.build(month_end - HOUR, schedule) for schedule in schedules],
    )
    print(f"cost buckets: {args.subscriptions} subscriptions in {seconds:.3f}s")


if __name__ == "__main__":
    main()
