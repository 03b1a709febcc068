"""How a window of hours splits for reading the ledger's sums: whole UTC months (the monthly
sums), whole UTC days around them (the daily sums), and the hours around those (the rows).

Why: a month of a large cluster is millions of hourly rows but thousands of monthly sums; the
split lets a read cost what its window's edges cost, whatever the window's length.
"""

from __future__ import annotations

import datetime as dt


def whole_days(start: dt.datetime, end: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The whole UTC days inside `[start, end)` as `[lo, hi)`; `(end, end)` when there are
    none. The daily sums answer for those days, the hourly rows for the hours around them."""
    lo = start.astimezone(dt.UTC)
    day_lo = lo.replace(hour=0, minute=0, second=0, microsecond=0)
    if day_lo < lo:
        day_lo += dt.timedelta(days=1)
    day_hi = end.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if day_lo >= day_hi:
        return end, end
    return day_lo, day_hi


def whole_months(day_lo: dt.datetime, day_hi: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The whole UTC months inside the whole days `[day_lo, day_hi)` as `[lo, hi)`;
    `(day_hi, day_hi)` when there are none. The monthly sums answer for those months."""
    lo = day_lo.replace(day=1)
    if lo < day_lo:
        lo = (lo + dt.timedelta(days=32)).replace(day=1)
    hi = day_hi.replace(day=1)
    if lo >= hi:
        return day_hi, day_hi
    return lo, hi


def params(
    cluster: str, start: dt.datetime, end: dt.datetime, **extra: object
) -> dict[str, object]:
    """The named parameters of a read over `[start, end)`: `start`, `end`, `day_lo`,
    `day_hi`, `month_lo`, `month_hi`, the cluster and `extra`."""
    day_lo, day_hi = whole_days(start, end)
    month_lo, month_hi = whole_months(day_lo, day_hi)
    return {
        "cluster": cluster,
        "start": start,
        "end": end,
        "day_lo": day_lo,
        "day_hi": day_hi,
        "month_lo": month_lo,
        "month_hi": month_hi,
        **extra,
    }
