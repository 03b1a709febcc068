"""Go-style durations (`90s`, `2m`, `1h30m`, `1.5h`) as used by CostJob timeouts and intervals.

The reference operator parses these with Go's `time.ParseDuration`; we accept the same
syntax (units ns, us, µs, ms, s, m, h; decimals; several terms; an optional sign) so a
manifest means the same thing here. Parsed exactly with `Decimal`, returned as a timedelta.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

_TERM = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_NANOS = {
    "ns": Decimal(1),
    "us": Decimal(1_000),
    "µs": Decimal(1_000),
    "μs": Decimal(1_000),
    "ms": Decimal(1_000_000),
    "s": Decimal(1_000_000_000),
    "m": Decimal(60_000_000_000),
    "h": Decimal(3_600_000_000_000),
}


class DurationError(ValueError):
    """The text is not a duration."""


def parse(text: str) -> dt.timedelta:
    """Parse a Go duration; raise DurationError naming the text when it is not one."""
    s = text.strip()
    sign = 1
    if s and s[0] in "+-":
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return dt.timedelta(0)
    if not s:
        raise DurationError(f"invalid duration {text!r}")
    pos, nanos = 0, Decimal(0)
    while pos < len(s):
        m = _TERM.match(s, pos)
        if m is None:
            raise DurationError(f"invalid duration {text!r}")
        nanos += Decimal(m.group(1)) * _NANOS[m.group(2)]
        pos = m.end()
    micros = int(nanos // 1000)
    return sign * dt.timedelta(microseconds=micros)


def format_seconds(delta: dt.timedelta) -> str:
    """A short human duration for records and logs, e.g. `1m2.5s` or `850ms`."""
    total_ms = int(delta / dt.timedelta(milliseconds=1))
    if total_ms < 1000:
        return f"{total_ms}ms"
    minutes, ms = divmod(total_ms, 60_000)
    seconds = Decimal(ms) / 1000
    sec_text = f"{seconds.normalize():f}s"
    return f"{minutes}m{sec_text}" if minutes else sec_text
