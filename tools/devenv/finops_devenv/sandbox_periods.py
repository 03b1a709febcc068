"""`finops sandbox --previous-month`: the sandbox's Subscriptions simulated from the last
hours of the previous month until that month has closed, so its statements can be opened.

Why back-date: the controller activates the examples now, and a billing period closes only
after it has ended and its grace time has passed. So the sandbox stamps `activatedAt` a few
hours before the current month began (as the controller would have, then) and runs both jobs
hour by hour from there, exactly as their CronJobs would have, until the first hours of this
month, when the previous month closes (the sandbox's charge runs wait `GRACE_HOURS`).
"""

from __future__ import annotations

import datetime as dt
from typing import TextIO

from finops.billing import periods, ticks
from finops.store import focus as focus_store
from finops.store import pool
from finops.store import statements as store_statements

GRACE_HOURS = 2
"""The grace time the sandbox's charge runs close a period after (`FINOPS_PERIOD_GRACE_HOURS`)."""
LEAD_HOURS = 6
"""How many hours of the previous month the Subscriptions are charged for."""
GROUP = "/apis/finops.stakater.com/v1alpha1"


def activation(now: dt.datetime) -> dt.datetime:
    """When the back-dated Subscriptions activate: a quarter past, `LEAD_HOURS` before the
    current (UTC) month began, so the opening ticks are prorated."""
    return ticks.floor_month(now) - LEAD_HOURS * ticks.HOUR + dt.timedelta(minutes=15)


def hours_until_closed(activated: dt.datetime) -> int:
    """Hours to simulate after the activation hour until the previous month has closed."""
    closes = ticks.floor_month(activated + (LEAD_HOURS + 1) * ticks.HOUR)
    closes += (GRACE_HOURS + 1) * ticks.HOUR
    return (closes - ticks.floor_hour(activated)) // ticks.HOUR


def report(dsn: str, gateway_url: str, out: TextIO) -> None:
    """The closed periods' statements, and how to open each one."""
    with pool.connect(dsn) as conn:
        index = focus_store.period_index(conn, cluster=pool.DEFAULT_CLUSTER)
        found = [
            (period, namespace)
            for period in index.closed
            for namespace in store_statements.namespaces(
                conn, cluster=pool.DEFAULT_CLUSTER, start=period.start, end=period.end
            )
        ]
    if not found:
        print("\nNo billing period has closed yet.", file=out)
        return
    print("\nClosed billing periods and their statements:", file=out)
    for period, namespace in found:
        invoice = periods.invoice_id(pool.DEFAULT_CLUSTER, namespace, period.start, period.label)
        page = f"{gateway_url}/api/v1/namespaces/{namespace}/statements/{period.label}"
        print(
            f"  {period.label} ({ticks.rfc3339(period.start)} to {ticks.rfc3339(period.end)}) "
            f"{namespace}: {invoice}\n"
            f"    open in a browser: {page}?format=html\n"
            f"    finops statement --dsn '{dsn}' --period {period.label} --namespace {namespace}"
            f" --out {invoice}.html",
            file=out,
        )
