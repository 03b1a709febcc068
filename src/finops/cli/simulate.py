"""`finops simulate` (being built)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    """Add the `simulate` sub-command."""
    p: argparse.ArgumentParser = sub.add_parser("simulate", help="simulate (not implemented yet)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Not built yet."""
    print("finops simulate: not implemented yet", file=sys.stderr)
    return 2
