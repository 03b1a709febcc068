"""The operator binary: one image, one entry point, a mode per process."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

MODES = ("controller", "cronjob", "collectionjob")


def _flag(value: str) -> bool:
    """A Go-style boolean flag value (`--flag=false`)."""
    lowered = value.strip().lower()
    if lowered in ("true", "1", "t", "yes"):
        return True
    if lowered in ("false", "0", "f", "no"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {value!r}")


def build_parser() -> argparse.ArgumentParser:
    """Flags of the reference manager; modes select which process this is."""
    p = argparse.ArgumentParser(
        prog="finops-operator",
        description="FinOps operator: controller manager and the two one-shot job modes.",
    )
    p.add_argument(
        "--mode",
        choices=MODES,
        default="controller",
        help="controller (long-lived manager), cronjob (allocation collection) "
        "or collectionjob (subscription charge collection)",
    )
    p.add_argument(
        "--metrics-bind-address",
        default="0",
        help="address the metrics endpoint binds to ('0' disables it)",
    )
    p.add_argument(
        "--health-probe-bind-address", default=":8081", help="address the probe endpoint binds to"
    )
    p.add_argument(
        "--leader-elect", action="store_true", help="elect a leader through a Lease before acting"
    )
    p.add_argument(
        "--metrics-secure",
        nargs="?",
        const=True,
        default=True,
        type=_flag,
        metavar="BOOL",
        help="serve metrics over HTTPS to authorised callers only (default true; "
        "--metrics-secure=false serves plain HTTP)",
    )
    p.add_argument(
        "--webhook-cert-path", default="", help="directory holding the webhook certificate"
    )
    p.add_argument("--webhook-cert-name", default="tls.crt", help="webhook certificate file name")
    p.add_argument("--webhook-cert-key", default="tls.key", help="webhook key file name")
    p.add_argument(
        "--skipDBConnection", action="store_true", help="do not connect to PostgreSQL at start"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to the selected mode (controller, or one of the two one-shot jobs)."""
    args = build_parser().parse_args(argv)
    if args.mode == "controller":
        from finops.controller import app

        return app.main(args)
    from finops import logs
    from finops.jobs import allocations, charges

    logs.configure()
    if args.mode == "cronjob":
        return allocations.main()
    return charges.main()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
