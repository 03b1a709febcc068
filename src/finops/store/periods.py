"""Billing periods in the ledger: closing them, the terms and changes that ask for rechecks,
and the corrections booked for closed hours (migration 0009).

Every function joins the caller's transaction and never commits; the charge run calls them in
one unit of work under the cluster's charge lock, so a close and its corrections commit
together or not at all. The database itself refuses rows in closed hours and a close that is
out of order or leaves a charge row open, whatever a caller does.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import psycopg

from finops.billing import periods, ticks
from finops.collection import rechecks
from finops.store import allocations


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    return None if value is None else value.astimezone(dt.UTC)


@dataclasses.dataclass(frozen=True)
class ClosedPeriod:
    """One row of `billing_periods`."""

    start: dt.datetime
    end: dt.datetime
    label: str
    time_zone: str
    closed_by_run: dt.datetime


def closed_periods(conn: psycopg.Connection[Any], *, cluster: str) -> list[ClosedPeriod]:
    """The cluster's closed periods, oldest first."""
    rows = conn.execute(
        """
        SELECT period_start, period_end, label, time_zone, closed_by_run FROM billing_periods
        WHERE cluster = %s ORDER BY period_start
        """,
        (cluster,),
    ).fetchall()
    return [
        ClosedPeriod(s.astimezone(dt.UTC), e.astimezone(dt.UTC), lb, tz, r.astimezone(dt.UTC))
        for s, e, lb, tz, r in rows
    ]


def closed_through(conn: psycopg.Connection[Any], *, cluster: str) -> dt.datetime | None:
    """The end of the cluster's last closed period; None when none is closed."""
    row = conn.execute("SELECT finops_closed_through(%s)", (cluster,)).fetchone()
    return None if row is None else _utc(row[0])


def save_calendar(
    conn: psycopg.Connection[Any], *, cluster: str, calendar: periods.Calendar
) -> None:
    """Record the calendar the charge run closes by (readers place open hours with it)."""
    conn.execute(
        """
        INSERT INTO billing_calendars (cluster, time_zone, grace_hours) VALUES (%s, %s, %s)
        ON CONFLICT (cluster) DO UPDATE SET time_zone = EXCLUDED.time_zone,
            grace_hours = EXCLUDED.grace_hours
        WHERE (billing_calendars.time_zone, billing_calendars.grace_hours)
              IS DISTINCT FROM (EXCLUDED.time_zone, EXCLUDED.grace_hours)
        """,
        (cluster, calendar.time_zone, calendar.grace // dt.timedelta(hours=1)),
    )


def calendar_of(conn: psycopg.Connection[Any], *, cluster: str) -> periods.Calendar:
    """The calendar the cluster's charge run last used (the default before its first run)."""
    row = conn.execute(
        "SELECT time_zone, grace_hours FROM billing_calendars WHERE cluster = %s", (cluster,)
    ).fetchone()
    if row is None:
        return periods.Calendar()
    return periods.Calendar(str(row[0]), dt.timedelta(hours=int(row[1])))


def note_usage_final(conn: psycopg.Connection[Any], *, cluster: str, before: dt.datetime) -> None:
    """Usage charge rows before `before` may be final from now on (only moves forward); a
    changed allocation hour before it needs a recheck, after it the charge run redoes it."""
    conn.execute(
        """
        INSERT INTO billing_calendars (cluster, time_zone, grace_hours, usage_final_before)
        VALUES (%s, %s, %s, %s)
        ON CONFLICT (cluster) DO UPDATE SET usage_final_before = greatest(
            billing_calendars.usage_final_before, EXCLUDED.usage_final_before)
        WHERE billing_calendars.usage_final_before IS DISTINCT FROM greatest(
            billing_calendars.usage_final_before, EXCLUDED.usage_final_before)
        """,
        (cluster, periods.DEFAULT_TIME_ZONE, periods.DEFAULT_GRACE_HOURS, before),
    )


def usage_final_before(conn: psycopg.Connection[Any], *, cluster: str) -> dt.datetime | None:
    row = conn.execute(
        "SELECT usage_final_before FROM billing_calendars WHERE cluster = %s", (cluster,)
    ).fetchone()
    return None if row is None else _utc(row[0])


# The cluster's earliest charged hour: the first hour of each of its Subscription versions,
# by one probe of the `(version, hour)` index each (a scan of the charges would read them
# all). A charge row is of its version's cluster, so the probe names no cluster: with it,
# stale statistics right after a first run made the planner AND a scan of the cluster's
# whole primary key into every probe (18 s for 2,500 versions instead of milliseconds).
_FIRST_HOUR = """
    SELECT min(f.hour) FROM subscription_versions v CROSS JOIN LATERAL (
        SELECT c.hour FROM subscription_charges c
        WHERE c.subscription_version_id = v.id
        ORDER BY c.hour LIMIT 1) f
    WHERE v.cluster = %(cluster)s
"""

# The cluster's earliest charged UTC day, from the day sums (one primary-key probe); they
# hold exactly the committed rows, and `facts` is asked before the run writes any more.
_FIRST_DAY = "SELECT min(day) FROM charge_days WHERE cluster = %(cluster)s"


def _first_period_hour(
    conn: psycopg.Connection[Any], cluster: str, calendar: periods.Calendar
) -> dt.datetime | None:
    """An hour in the period of the cluster's earliest charge, which is all closing asks
    about it: the first charged day when no period starts inside it (every hour of the day
    is then in the same period), else the exact first hour (one probe per version)."""
    day = conn.execute(_FIRST_DAY, {"cluster": cluster}).fetchone()
    if day is None or day[0] is None:
        return None
    first_day: dt.datetime = day[0].astimezone(dt.UTC)
    if calendar.period_of(first_day, None).end >= first_day + ticks.DAY:
        return first_day
    row = conn.execute(_FIRST_HOUR.encode(), {"cluster": cluster}).fetchone()
    return None if row is None else _utc(row[0])


def facts(
    conn: psycopg.Connection[Any], *, cluster: str, calendar: periods.Calendar
) -> periods.LedgerFacts:
    """What closing decides on: the closed horizon, an hour of the first charged period (only
    asked before the first close), the first open charge row, the allocation boundary."""
    through = closed_through(conn, cluster=cluster)
    first = None if through is not None else _first_period_hour(conn, cluster, calendar)
    row = conn.execute(
        "SELECT min(hour) FROM subscription_charges WHERE cluster = %s AND NOT finalized",
        (cluster,),
    ).fetchone()
    return periods.LedgerFacts(
        closed_through=through,
        first_hour=first,
        first_open=None if row is None else _utc(row[0]),
        allocation_boundary=allocations.allocation_boundary(conn, cluster=cluster),
    )


def close(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    closing: Sequence[periods.Period],
    time_zone: str,
    scheduled: dt.datetime,
) -> None:
    """Close the periods, oldest first (the database checks each one may close)."""
    for period in closing:
        conn.execute(
            """
            INSERT INTO billing_periods
                (cluster, period_start, period_end, label, time_zone, closed_by_run)
            VALUES (%s, %s, %s, %s, %s, %s)
            """,
            (cluster, period.start, period.end, period.label, time_zone, scheduled),
        )


def first_closed(conn: psycopg.Connection[Any], *, cluster: str) -> dt.datetime | None:
    row = conn.execute(
        "SELECT min(period_start) FROM billing_periods WHERE cluster = %s", (cluster,)
    ).fetchone()
    return None if row is None else _utc(row[0])


def terms(
    conn: psycopg.Connection[Any], *, cluster: str, uids: Collection[str]
) -> dict[str, rechecks.TermsRecord]:
    """The recorded terms of these Subscriptions (absent: never recorded)."""
    rows = conn.execute(
        """
        SELECT subscription_uid, activated_at, deactivated_at, offering_version_id,
               charged_through, recheck_from, recheck_to
        FROM charge_terms WHERE cluster = %s AND subscription_uid = ANY(%s)
        """,
        (cluster, list(uids)),
    ).fetchall()
    out: dict[str, rechecks.TermsRecord] = {}
    for uid, act, deact, ov, through, lo, hi in rows:
        window = None if lo is None else (lo.astimezone(dt.UTC), hi.astimezone(dt.UTC))
        out[str(uid)] = rechecks.TermsRecord(
            act.astimezone(dt.UTC), _utc(deact), int(ov), through.astimezone(dt.UTC), window
        )
    return out


def save_terms(
    conn: psycopg.Connection[Any], *, cluster: str, records: Mapping[str, rechecks.TermsRecord]
) -> None:
    """Record each Subscription's terms, how far it is charged and what waits to recheck."""
    if not records:
        return
    items = sorted(records.items())
    conn.execute(
        """
        INSERT INTO charge_terms (cluster, subscription_uid, activated_at, deactivated_at,
            offering_version_id, charged_through, recheck_from, recheck_to)
        SELECT %s, * FROM unnest(%s::text[], %s::timestamptz[], %s::timestamptz[],
                                 %s::bigint[], %s::timestamptz[], %s::timestamptz[],
                                 %s::timestamptz[])
        ON CONFLICT (cluster, subscription_uid) DO UPDATE SET
            activated_at = EXCLUDED.activated_at, deactivated_at = EXCLUDED.deactivated_at,
            offering_version_id = EXCLUDED.offering_version_id,
            charged_through = EXCLUDED.charged_through,
            recheck_from = EXCLUDED.recheck_from, recheck_to = EXCLUDED.recheck_to
        WHERE (charge_terms.activated_at, charge_terms.deactivated_at,
               charge_terms.offering_version_id, charge_terms.charged_through,
               charge_terms.recheck_from, charge_terms.recheck_to)
              IS DISTINCT FROM (EXCLUDED.activated_at, EXCLUDED.deactivated_at,
                                EXCLUDED.offering_version_id, EXCLUDED.charged_through,
                                EXCLUDED.recheck_from, EXCLUDED.recheck_to)
        """,
        (
            cluster,
            [u for u, _ in items],
            [r.activated_at for _, r in items],
            [r.deactivated_at for _, r in items],
            [r.offering_version_id for _, r in items],
            [r.charged_through for _, r in items],
            [None if r.recheck is None else r.recheck[0] for _, r in items],
            [None if r.recheck is None else r.recheck[1] for _, r in items],
        ),
    )


def hold_allocation_writes(conn: psycopg.Connection[Any]) -> None:
    """Until the caller's transaction ends, allocation writes wait: the lock waits for those
    in flight (so the caller's later statements read their rows) and holds new ones back (so
    a change the caller did not read is recorded after it forgets hours, never merged into a
    row it deletes: an existing row makes the allocation trigger's insert do nothing)."""
    conn.execute(b"LOCK TABLE allocation_changes IN SHARE ROW EXCLUSIVE MODE")


def changed_hours(conn: psycopg.Connection[Any], *, cluster: str) -> list[dt.datetime]:
    """The allocation hours recorded as changed; allocation writes wait until the caller's
    transaction ends (`hold_allocation_writes`), so the hours it rechecks and forgets are
    exactly the changes it read."""
    hold_allocation_writes(conn)
    rows = conn.execute(
        "SELECT hour FROM allocation_changes WHERE cluster = %s ORDER BY hour", (cluster,)
    ).fetchall()
    return [r[0].astimezone(dt.UTC) for r in rows]


def forget_changes_recharged(conn: psycopg.Connection[Any], *, cluster: str) -> None:
    """Forget the changed allocation hours the charge write about to run recomputes: every
    usage row from the first hour whose usage is not final yet (and not closed) is rewritten
    from the allocation rows as they are now, so their changes are in it and none needs a
    recheck when its period closes. Kept, they made each close recompute the whole month for
    every Subscription that bills usage.

    Call in the write's transaction, before its statements: allocation writes wait until it
    commits (`hold_allocation_writes`)."""
    hold_allocation_writes(conn)
    conn.execute(
        b"""
        DELETE FROM allocation_changes
        WHERE cluster = %(cluster)s AND hour >= greatest(
            (SELECT usage_final_before FROM billing_calendars WHERE cluster = %(cluster)s),
            finops_closed_through(%(cluster)s), '-infinity')
        """,
        {"cluster": cluster},
    )


def forget_changed_hours(
    conn: psycopg.Connection[Any], *, cluster: str, hours: Collection[dt.datetime]
) -> None:
    if hours:
        conn.execute(
            "DELETE FROM allocation_changes WHERE cluster = %s AND hour = ANY(%s)",
            (cluster, list(hours)),
        )


# Fee rows keep the currency their hour was charged in: the fee takes the ledger's latest
# currency when it is written, and a recheck must not re-price history by a later PriceBook.
_FEE_CURRENCY = """
    UPDATE charge_stage s SET currency = c.currency
    FROM subscription_charges c
    WHERE s.source = 'subscription' AND c.cluster = %(cluster)s
      AND c.subscription_uid = s.subscription_uid AND c.hour = s.hour
      AND c.source = 'subscription' AND s.currency <> c.currency
"""

_ENTRY = """{t}.subscription_uid, {t}.hour, {t}.source, {t}.currency, {t}.pricebook_id,
    {t}.unit_price_micros, {sign}{t}.quantity, {sign}{t}.amount_micros, {t}.covers_start,
    {t}.covers_end, {t}.offering_version_id, {t}.subscription_version_id, {side} AS side"""

# Truth (the staged rows of the recheck windows, `charge_sql.stage`) minus what the ledger
# holds for the same hours (charge rows and earlier corrections), per (Subscription, hour,
# source, currency, PriceBook, unit price): what is left is booked. A part that changed price
# or currency is reversed and booked anew, so each correction row has one price.
_BOOK = f"""
    INSERT INTO charge_corrections (cluster, booked_in, booked_by_run, corrects_period,
        subscription_uid, hour, source, currency, pricebook_id, unit_price_micros, quantity,
        amount_micros, covers_start, covers_end, offering_version_id, subscription_version_id)
    WITH entries AS (
        SELECT {_ENTRY.format(t="s", sign="", side=2)} FROM charge_stage s
        UNION ALL
        SELECT {_ENTRY.format(t="c", sign="-", side=1)}
        FROM charge_subs w JOIN subscription_charges c ON c.cluster = %(cluster)s
             AND c.subscription_uid = w.uid AND c.hour >= w.lo AND c.hour < w.hi
        UNION ALL
        SELECT {_ENTRY.format(t="k", sign="-", side=0)}
        FROM charge_subs w JOIN charge_corrections k ON k.cluster = %(cluster)s
             AND k.subscription_uid = w.uid AND k.hour >= w.lo AND k.hour < w.hi
    ), delta AS (
        SELECT subscription_uid, hour, source, currency, pricebook_id, unit_price_micros,
               sum(quantity) AS q, sum(amount_micros) AS a,
               (array_agg(covers_start ORDER BY side DESC))[1] AS cs,
               (array_agg(covers_end ORDER BY side DESC))[1] AS ce,
               (array_agg(offering_version_id ORDER BY side DESC))[1] AS ov,
               (array_agg(subscription_version_id ORDER BY side DESC))[1] AS sv
        FROM entries
        GROUP BY subscription_uid, hour, source, currency, pricebook_id, unit_price_micros
    )
    SELECT %(cluster)s, %(booked_in)s, %(run)s, p.period_start, d.subscription_uid, d.hour,
           d.source, d.currency, d.pricebook_id, d.unit_price_micros, d.q, d.a, d.cs, d.ce,
           d.ov, d.sv
    FROM delta d JOIN billing_periods p ON p.cluster = %(cluster)s
         AND d.hour >= p.period_start AND d.hour < p.period_end
    WHERE d.q <> 0 OR d.a <> 0
    ORDER BY d.subscription_uid, d.hour, d.source, d.currency, d.pricebook_id,
             d.unit_price_micros
    RETURNING currency, amount_micros
"""


@dataclasses.dataclass(frozen=True)
class Booked:
    """Corrections one run booked: rows, and micros per currency (signed)."""

    rows: int
    micros: dict[str, int]


def book_corrections(
    conn: psycopg.Connection[Any], *, cluster: str, booked_in: dt.datetime, run: dt.datetime
) -> Booked:
    """Book the difference between the staged hours and the ledger as corrections in the
    period starting at `booked_in` (the first open one); the caller staged the recheck
    windows with `charge_sql.stage` in this transaction."""
    params = {"cluster": cluster, "booked_in": booked_in, "run": run}
    conn.execute(_FEE_CURRENCY.encode(), params)
    rows = conn.execute(_BOOK.encode(), params).fetchall()
    micros: dict[str, int] = {}
    for currency, amount in rows:
        micros[str(currency)] = micros.get(str(currency), 0) + int(amount)
    return Booked(len(rows), micros)


@dataclasses.dataclass(frozen=True)
class CorrectionSum:
    """Corrections booked in one period for one namespace and currency."""

    namespace: str
    booked_in: dt.datetime
    currency: str
    micros: int
    rows: int


def correction_sums(conn: psycopg.Connection[Any], *, cluster: str) -> list[CorrectionSum]:
    """Every booked correction, summed per namespace, booking period and currency."""
    rows = conn.execute(
        """
        SELECT v.namespace, k.booked_in, k.currency, sum(k.amount_micros), count(*)
        FROM charge_corrections k JOIN subscription_versions v ON v.id = k.subscription_version_id
        WHERE k.cluster = %s
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        """,
        (cluster,),
    ).fetchall()
    return [
        CorrectionSum(str(ns), at.astimezone(dt.UTC), str(cur), int(total), int(n))
        for ns, at, cur, total, n in rows
    ]
