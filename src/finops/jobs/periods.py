"""The billing-period step of a charge run: close what may close, book corrections.

Runs right after the charge rows are written, as its own unit of work under the cluster's
charge lock: read what closing decides on, close the periods that are settled (in order),
then recompute the closed hours something asks about (`finops.collection.rechecks`) and book
the differences as corrections in the first open period, and record each Subscription's
terms for the next run. A kill anywhere leaves the ledger as before the step; the next run
of the same hour does it again and reaches the same result.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Sequence

from finops.billing import money, periods, ticks
from finops.collection import charge_plan, rechecks
from finops.store import charge_sql, pool, unit
from finops.store import periods as store_periods

log = logging.getLogger("finops.jobs.periods")


@dataclasses.dataclass(frozen=True)
class Settled:
    """What the step did: periods closed, corrections booked, Subscriptions rechecked."""

    closed: tuple[periods.Period, ...]
    corrections: store_periods.Booked
    rechecked: int
    waiting: tuple[periods.Period, str] | None


def settle(
    conn: pool.Connection,
    *,
    cluster: str,
    calendar: periods.Calendar,
    scheduled: dt.datetime,
    billed: Sequence[charge_plan.Billed],
    inputs: charge_plan.Inputs,
) -> Settled:
    """Close, recheck and record in one transaction (see the module docstring); `inputs` are
    the run's, with its charge windows before clipping to the open periods."""
    with unit.begin(conn) as work:
        charge_sql.lock(conn, cluster)
        store_periods.save_calendar(conn, cluster=cluster, calendar=calendar)
        facts = store_periods.facts(conn, cluster=cluster, calendar=calendar)
        closing = periods.closable(calendar, facts, scheduled)
        store_periods.close(
            conn,
            cluster=cluster,
            closing=closing,
            time_zone=calendar.time_zone,
            scheduled=scheduled,
        )
        through = closing[-1].end if closing else facts.closed_through
        closed = None
        if through is not None:
            first = store_periods.first_closed(conn, cluster=cluster) or through
            closed = rechecks.Closed(first, through)
        plan, recorded = _plan(conn, cluster, closed, scheduled, billed, inputs)
        booked = _correct(conn, cluster, closed, plan, scheduled, billed, inputs)
        store_periods.save_terms(
            conn, cluster=cluster, records=rechecks.changed(plan.records, recorded)
        )
        store_periods.forget_changed_hours(conn, cluster=cluster, hours=plan.done_hours)
        work.commit()
    settled = Settled(tuple(closing), booked, len(plan.windows), None)
    if not closing:
        settled = dataclasses.replace(settled, waiting=periods.why_open(calendar, facts, scheduled))
    _log(settled)
    return settled


def _plan(
    conn: pool.Connection,
    cluster: str,
    closed: rechecks.Closed | None,
    scheduled: dt.datetime,
    billed: Sequence[charge_plan.Billed],
    inputs: charge_plan.Inputs,
) -> tuple[rechecks.Rechecks, dict[str, rechecks.TermsRecord]]:
    """The rechecks, and the terms recorded before them (read in the same transaction)."""
    subs = rechecks.charged(billed, inputs.versions, inputs.windows)
    records = store_periods.terms(conn, cluster=cluster, uids=[s.uid for s in subs])
    hours = store_periods.changed_hours(conn, cluster=cluster)
    final = store_periods.usage_final_before(conn, cluster=cluster)
    return rechecks.plan(subs, records, closed, scheduled, hours, final), records


def _correct(
    conn: pool.Connection,
    cluster: str,
    closed: rechecks.Closed | None,
    plan: rechecks.Rechecks,
    scheduled: dt.datetime,
    billed: Sequence[charge_plan.Billed],
    inputs: charge_plan.Inputs,
) -> store_periods.Booked:
    """Recompute the recheck windows and book what differs from the ledger."""
    if closed is None or not plan.windows:
        return store_periods.Booked(0, {})
    again = [
        b for b in billed if b.sub.uid in plan.windows and b.sub.uid in inputs.versions.offering
    ]
    truth = dataclasses.replace(inputs, boundary=None, windows=plan.windows)
    tables = charge_plan.tables(again, truth, scheduled)
    charge_sql.stage(conn, cluster=cluster, tables=tables, scheduled=scheduled)
    return store_periods.book_corrections(
        conn, cluster=cluster, booked_in=closed.through, run=scheduled
    )


def _log(settled: Settled) -> None:
    for period in settled.closed:
        log.info(
            "closed billing period %s [%s, %s): its statements are final",
            period.label,
            ticks.rfc3339(period.start),
            ticks.rfc3339(period.end),
        )
    if settled.waiting is not None:
        period, reason = settled.waiting
        log.info("billing period %s stays open: %s", period.label, reason)
    if settled.corrections.rows:
        amounts = ", ".join(
            f"{money.format_units(m)} {c or 'no currency'}"
            for c, m in sorted(settled.corrections.micros.items())
        )
        log.info(
            "booked %d correction row(s) for closed hours of %d subscription(s): %s",
            settled.corrections.rows,
            settled.rechecked,
            amounts,
        )
