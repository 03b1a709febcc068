"""How well a Budget's forecast predicts the month: a backtest over generated ledgers.

Why: the forecast (`finops.billing.forecast`) claims to beat the naive linear extrapolation
cloud budgets use ("spent so far × days in month / days elapsed") because fees are known in
advance and only usage is estimated. This measures that claim: each generated budget (ten
Subscriptions of one namespace) gets a month of hourly charges written as the charge run
writes them; at the end of day 3, 10 and 20 both methods predict the month from what the
ledger and the Subscriptions showed at that hour, and each is scored by its mean absolute
percentage error (MAPE) against the month's actual total. Both are computed in the same run
on the same ledgers, at three sizes (`--budgets`, ×1/×2/×4).

What the generator puts in a month (seeded, so runs repeat):
- fees of every alignment (hourly on activation, every 1 or 6 hours on the UTC grid, daily,
  weekly, monthly), some Subscriptions without a fee;
- usage with a daily rhythm (busier 08:00–18:00 UTC), quieter weekends, a trend of −0.5 % to
  +1.5 % a day and ±25 % noise per hour; some Subscriptions without usage;
- one Subscription in ten activated during the month, and about one in eight deactivated
  during it. Neither method knows about an activation or a deactivation
  before it happens: the forecast reads `activatedAt`/`deactivatedAt` as of its hour.

    .venv/bin/python -m benchmarks.forecast [--budgets 40] [--seed 25]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import random
import time
from collections.abc import Sequence

from finops.billing import fees, forecast, usage

UTC = dt.UTC
HOUR = dt.timedelta(hours=1)
MONTH = (dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC))
HOURS = (MONTH[1] - MONTH[0]) // HOUR
DAYS = (3, 10, 20)
PER_BUDGET = 10
FEE_CHOICES = (
    None,
    ("ActivatedAt", "1h", 40_000_000),
    ("HourBoundary", "1", 2_500_000),
    ("HourBoundary", "6", 9_000_000),
    ("DayBoundary", "1", 12_000_000),
    ("DayBoundary", "7", 300_000_000),
    ("MonthBoundary", "1", 900_000_000),
)


@dataclasses.dataclass(frozen=True)
class Generated:
    """One Subscription's month: its fee terms, its active interval, its hourly charges."""

    fee: tuple[str, str, int] | None
    activated: dt.datetime
    deactivated: dt.datetime | None
    hourly: tuple[int, ...]
    """Micros charged in each hour of the month (fee and usage)."""
    usage: tuple[int, ...]
    """The usage part of `hourly`."""

    def schedule(self, known_at: dt.datetime) -> fees.FeeSchedule | None:
        """The fee schedule as the charge run knows it at `known_at`."""
        if self.fee is None:
            return None
        alignment, period, price = self.fee
        spec = fees.FeeSpec.from_fee_block(
            {"priceMicros": price, "tickAlignment": alignment, "period": period}
        )
        return spec.schedule(self.activated, self.deactivation_known(known_at))

    def deactivation_known(self, at: dt.datetime) -> dt.datetime | None:
        return self.deactivated if self.deactivated is not None and self.deactivated <= at else None


def _usage(rng: random.Random, interval: usage.ActiveInterval) -> list[int]:
    """Hourly usage micros over the month: rhythm, weekends, trend and noise."""
    if rng.random() < 0.2:
        return [0] * HOURS
    base = rng.lognormvariate(12.5, 0.8)  # around 0.27 an hour, widely spread
    trend = rng.uniform(-0.005, 0.015)
    out = []
    for h in range(HOURS):
        hour = MONTH[0] + h * HOUR
        share = interval.overlap_microseconds(hour, hour + HOUR) / 3_600_000_000
        if share == 0:
            out.append(0)
            continue
        rate = base * (1 + trend) ** (h / 24)
        rate *= 1.6 if 8 <= hour.hour < 18 else 0.7
        rate *= 0.6 if hour.weekday() >= 5 else 1.0
        rate *= rng.uniform(0.75, 1.25)
        out.append(int(rate * share))
    return out


def subscription(rng: random.Random) -> Generated:
    """One generated Subscription and its month of charges."""
    fee = rng.choice(FEE_CHOICES)
    if rng.random() < 0.1:
        activated = MONTH[0] + dt.timedelta(seconds=rng.randrange(0, 26 * 86400))
    else:
        activated = MONTH[0] - dt.timedelta(seconds=rng.randrange(0, 90 * 86400))
    deactivated = None
    if rng.random() < 0.125:
        lo = max(activated, MONTH[0])
        deactivated = lo + dt.timedelta(seconds=rng.randrange(3600, 25 * 86400))
        deactivated = min(deactivated, MONTH[1] - HOUR)
    used = _usage(rng, usage.ActiveInterval(activated, deactivated))
    generated = Generated(fee, activated, deactivated, (), tuple(used))
    hourly = list(used)
    schedule = generated.schedule(MONTH[1])
    if schedule is not None:
        for h, (_, micros) in enumerate(schedule.hourly(*MONTH)):
            hourly[h] += micros
    return dataclasses.replace(generated, hourly=tuple(hourly))


def budgets(count: int, seed: int) -> list[list[Generated]]:
    rng = random.Random(seed)
    return [[subscription(rng) for _ in range(PER_BUDGET)] for _ in range(count)]


def predict(subs: Sequence[Generated], day: int) -> tuple[int, int]:
    """(forecast, naive) for the month, made at the end of `day` (the run of its last hour)."""
    scheduled = MONTH[0] + day * 24 * HOUR - HOUR
    h = (scheduled - MONTH[0]) // HOUR
    spent = sum(sum(s.hourly[: h + 1]) for s in subs)
    naive = spent * HOURS // (h + 1)
    lo, hi = forecast.usage_window(scheduled)
    first, last = max(0, (lo - MONTH[0]) // HOUR), (hi - MONTH[0]) // HOUR
    outlooks = [
        forecast.Outlook(
            s.schedule(scheduled),
            usage.ActiveInterval(s.activated, s.deactivation_known(scheduled)),
            sum(s.usage[first:last]),
        )
        for s in subs
        if s.activated <= scheduled
    ]
    return forecast.forecast(spent, outlooks, scheduled, MONTH[1]).total, naive


def mape(pairs: Sequence[tuple[int, int]]) -> float:
    """Mean absolute percentage error of (predicted, actual) pairs."""
    return 100 * sum(abs(p - a) / a for p, a in pairs) / len(pairs) if pairs else float("nan")


def settled(subs: Sequence[Generated], day: int) -> bool:
    """No Subscription of the budget activates or deactivates after `day`: what is left to
    predict is the usage alone."""
    at = MONTH[0] + day * 24 * HOUR - HOUR
    return not any(s.activated > at or (s.deactivated or at) > at for s in subs)


def _row(scale: int, generated: list[list[Generated]], day: int) -> str:
    actual = [sum(sum(s.hourly) for s in b) for b in generated]
    began = time.perf_counter()
    made = [predict(b, day) for b in generated]
    took = (time.perf_counter() - began) / len(generated) * 1e6
    calm = [i for i, b in enumerate(generated) if settled(b, day)]
    figures = []
    for chosen in (range(len(generated)), calm):
        ours = mape([(made[i][0], actual[i]) for i in chosen])
        naive = mape([(made[i][1], actual[i]) for i in chosen])
        figures.append(f"{ours:>7.2f}% {naive:>7.2f}% {naive / ours:>6.1f}×")
    return (
        f"{'×' + str(scale):>4} {len(generated):>7} {day:>3}  {figures[0]}  {len(calm):>4}  "
        f"{figures[1]}  {took:>5.0f} µs"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", type=int, default=40, help="budgets at ×1 (default 40)")
    parser.add_argument("--seed", type=int, default=25)
    args = parser.parse_args(argv)
    print(f"March 2026, {PER_BUDGET} Subscriptions per budget; MAPE against the month's total")
    print("                 every budget                   with no (de)activation ahead")
    print("size budgets day  forecast    naive   ratio     n  forecast    naive   ratio     time")
    for scale in (1, 2, 4):
        generated = budgets(args.budgets * scale, args.seed + scale)
        rows = sum(1 for b in generated for s in b for m in s.hourly if m)
        print(f"  ({rows:,} hourly charge rows at ×{scale})")
        for day in DAYS:
            print(_row(scale, generated, day))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
