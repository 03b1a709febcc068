"""The `finops` command for people: offline validation, cost simulation, FOCUS export and
statements; installed tools add their own sub-commands (the development tools add `sandbox`)."""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Sequence

from finops.cli import export, simulate, statement, validate

COMMANDS_GROUP = "finops.commands"
"""Entry points of this group are called with the sub-command registry to add their own."""


def build_parser() -> argparse.ArgumentParser:
    """One sub-command per module; each module registers its own arguments."""
    parser = argparse.ArgumentParser(
        prog="finops",
        description="FinOps operator tools: check manifests offline, simulate what an "
        "Offering will cost, export the ledger as FOCUS rows, print billing statements.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    validate.register(sub)
    simulate.register(sub)
    export.register(sub)
    statement.register(sub)
    for entry in sorted(importlib.metadata.entry_points(group=COMMANDS_GROUP), key=str):
        entry.load()(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen sub-command and return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    status: int = args.run(args)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
