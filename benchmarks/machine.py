"""What the shared machine was doing while a benchmark ran: every figure is printed with it."""

from __future__ import annotations

import pathlib


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages, as `/proc/loadavg` gives them."""
    return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])
