"""`finops sandbox`: the whole product locally, with real services and real OpenCost data."""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any


def register(sub: Any) -> None:
    """Add the `sandbox` sub-command."""
    p: argparse.ArgumentParser = sub.add_parser(
        "sandbox",
        help="run the operator locally against a real API server, PostgreSQL and replayed "
        "OpenCost data, and print what the example Subscriptions cost",
        description="Start kube-apiserver + etcd, PostgreSQL, an OpenCost replay server and the "
        "controller; apply examples/; run allocation and charge collection for a few simulated "
        "hours; print a cost table. Stops cleanly on Ctrl-C.",
    )
    p.add_argument(
        "--hours",
        type=int,
        default=None,
        help="simulated hours of collection (default 3; not with --real-node)",
    )
    p.add_argument(
        "--real-node",
        action="store_true",
        help="run the chart's pods on a real single-node cluster on this machine (root; builds "
        "the images, installs the chart with its dependencies, runs the CronJobs on the real "
        "clock)",
    )
    p.add_argument(
        "--exit-after-report",
        action="store_true",
        help="print the table and exit 0 instead of running until Ctrl-C",
    )
    p.add_argument(
        "--previous-month",
        action="store_true",
        help="back-date the example Subscriptions to the last hours of the previous month and "
        "simulate until that month has closed, to show its statements",
    )
    p.add_argument(
        "--state-dir",
        type=pathlib.Path,
        default=pathlib.Path(".sandbox"),
        help="where the controller log goes (default .sandbox/)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Start the sandbox (imports its heavy dependencies only when asked for)."""
    if args.real_node:
        if args.hours is not None or args.previous_month:
            print(
                "finops sandbox: --hours and --previous-month simulate hours in-process; with "
                "--real-node the CronJobs run on the real clock, so leave them out",
                file=sys.stderr,
            )
            return 1
        from finops_devenv import node_sandbox

        return node_sandbox.run(args.exit_after_report, sys.stdout)
    from finops_devenv import sandbox

    hours = 3 if args.hours is None else args.hours
    if hours < 0:
        print("finops sandbox: --hours must be 0 or more", file=sys.stderr)
        return 1
    return sandbox.run(
        hours, args.exit_after_report, args.state_dir, sys.stdout, args.previous_month
    )
