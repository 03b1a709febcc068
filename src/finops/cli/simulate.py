"""`finops simulate`: what an Offering's subscription fee will charge, hour by hour.

For people deciding on terms before applying them: the Offering is checked with the same
rules the API server applies, and the fee comes from the same billing core the collection job
uses, so the numbers printed are the numbers that will be charged.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import pathlib
import sys
from typing import Any, cast

import yaml

from finops.api import bodies
from finops.billing import fees, money, ticks
from finops.cli import refusal


def register(sub: Any) -> None:
    """Add the `simulate` sub-command."""
    p: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        help="print an Offering's subscription fee hour by hour",
        description="Print the subscription fee an Offering charges a Subscription, for every "
        "hour of [--from, --to), and the total. Times are RFC 3339 in UTC "
        "(e.g. 2026-04-01T09:00:00Z); --from and --to must be whole hours.",
    )
    p.add_argument("offering", metavar="OFFERING.yaml", help="the Offering manifest")
    p.add_argument("--activated-at", metavar="T", help="the Subscription's status.activatedAt")
    p.add_argument(
        "--deactivated-at", metavar="T", help="the Subscription's status.deactivatedAt, if any"
    )
    p.add_argument("--from", dest="window_from", metavar="T", help="first hour of the window")
    p.add_argument("--to", dest="window_to", metavar="T", help="end of the window (exclusive)")
    p.add_argument(
        "--json",
        action="store_true",
        help='print {"total_micros": N, "hours": [{"start": T, "micros": N}, ...]}',
    )
    p.set_defaults(run=run)


def _time(flag: str, value: str | None, *, required: bool = True) -> dt.datetime | None:
    if value is None:
        if required:
            raise refusal.Refused(f"{flag} is required")
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise refusal.Refused(
            f"{flag} {value!r} is not an RFC 3339 time such as 2026-04-01T09:00:00Z"
        ) from None
    if parsed.tzinfo is None:
        raise refusal.Refused(f"{flag} {value!r} has no timezone; write it in UTC with a Z suffix")
    return ticks.utc(parsed)


def _load_offering(path: str) -> dict[str, Any]:
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise refusal.Refused(f"cannot read {path}: {err.strerror or err}") from None
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as err:
        raise refusal.Refused(f"{path} is not valid YAML: {err}") from None
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise refusal.Refused(f"{path} must hold exactly one Offering object")
    obj: dict[str, Any] = documents[0]
    if obj.get("kind") != "Offering":
        raise refusal.Refused(
            f"{path} holds a {obj.get('kind') or 'object without kind'}, not an Offering"
        )
    return obj


def _validate(path: str, obj: dict[str, Any]) -> None:
    # Imported here so the CLI's other commands do not pay for the contract's CEL machinery.
    from finops.api import validation

    problems = validation.validate_object(obj)
    if problems:
        lines = "\n".join(f"  - {problem}" for problem in problems)
        raise refusal.Refused(f"{path} is not a valid Offering:\n{lines}")


def _plan(
    args: argparse.Namespace,
) -> tuple[dict[str, Any], fees.FeeSchedule | None, dt.datetime, dt.datetime]:
    activated = _time("--activated-at", args.activated_at)
    deactivated = _time("--deactivated-at", args.deactivated_at, required=False)
    start = _time("--from", args.window_from)
    end = _time("--to", args.window_to)
    assert activated is not None and start is not None and end is not None
    for flag, t in (("--from", start), ("--to", end)):
        if not ticks.is_whole_hour(t):
            raise refusal.Refused(
                f"{flag} {ticks.rfc3339(t)} is not a whole hour (minutes and seconds 0)"
            )
    if end <= start:
        raise refusal.Refused("--to must be later than --from")
    if deactivated is not None and deactivated < activated:
        raise refusal.Refused("--deactivated-at must not be earlier than --activated-at")
    obj = _load_offering(args.offering)
    _validate(args.offering, obj)
    try:
        spec = fees.FeeSpec.from_offering_spec(obj.get("spec") or cast(bodies.OfferingSpecBody, {}))
    except fees.FeeSpecError as err:
        raise refusal.Refused(f"{args.offering}: {err}") from None
    schedule = None if spec is None else spec.schedule(activated, deactivated)
    return obj, schedule, start, end


def _hours(
    schedule: fees.FeeSchedule | None, start: dt.datetime, end: dt.datetime
) -> list[tuple[dt.datetime, int]]:
    if schedule is not None:
        return schedule.hourly(start, end)
    hours = []
    hour = start
    while hour < end:
        hours.append((hour, 0))
        hour += ticks.HOUR
    return hours


def _print_table(
    obj: dict[str, Any], schedule: fees.FeeSchedule | None, hours: list[tuple[dt.datetime, int]]
) -> None:
    meta = obj.get("metadata") or {}
    name = "/".join(part for part in (meta.get("namespace"), meta.get("name")) if part)
    print(f"Offering {name or '(unnamed)'}")
    if schedule is None:
        print("  no subscriptionFee: the fee is 0 every hour")
    else:
        spec = schedule.spec
        print(
            f"  fee {money.format_units(spec.price_micros)} per tick, "
            f"{spec.tick_alignment.value} alignment, period {spec.period}"
        )
        if schedule.opening_tick_micros != spec.price_micros:
            print(f"  opening tick prorated to {money.format_units(schedule.opening_tick_micros)}")
        if schedule.deactivated_at is not None and schedule.end is not None:
            print(
                f"  deactivated {ticks.rfc3339(schedule.deactivated_at)}, "
                f"billed to the next boundary {ticks.rfc3339(schedule.end)}"
            )
    pricing = (obj.get("spec") or {}).get("pricing") or {}
    if pricing.get("resourcePricing"):
        print("  usage meters (resourcePricing) depend on measured usage and are not simulated")
    print("  amounts in units of the active PriceBook's currency")
    total = sum(micros for _, micros in hours)
    rows = [(ticks.rfc3339(hour), money.format_units(micros)) for hour, micros in hours]
    rows.append(("TOTAL", money.format_units(total)))
    width = max(len(amount) for _, amount in rows)
    print()
    print(f"{'HOUR (UTC)':<20}  {'FEE':>{width}}")
    for label, amount in rows[:-1]:
        print(f"{label:<20}  {amount:>{width}}")
    print(f"{rows[-1][0]:<20}  {rows[-1][1]:>{width}}")


def run(args: argparse.Namespace) -> int:
    """Print the fee hour by hour; exit 1 on a bad argument or an invalid Offering."""
    try:
        obj, schedule, start, end = _plan(args)
    except refusal.Refused as err:
        print(f"finops simulate: {err}", file=sys.stderr)
        return 1
    hours = _hours(schedule, start, end)
    if args.json:
        body = {
            "total_micros": sum(micros for _, micros in hours),
            "hours": [{"start": ticks.rfc3339(hour), "micros": micros} for hour, micros in hours],
        }
        print(json.dumps(body))
    else:
        _print_table(obj, schedule, hours)
    return 0
