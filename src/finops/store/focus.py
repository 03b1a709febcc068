"""Charge rows for the FOCUS export, streamed through a server-side cursor.

Why a cursor: a month of a large cluster is millions of rows, and the export writes them as
they come, so neither the gateway nor the CLI holds the window in memory. Each row carries
the namespace, name, namespace labels and own labels of the Subscription version that priced
it and the Offering's name. The caller's connection must not be in autocommit (a cursor lives
in a transaction); reads only.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any, TypedDict, cast

import psycopg

from finops.api import bodies
from finops.billing import focus, periods, ticks
from finops.store import allocations
from finops.store import periods as store_periods

BATCH = 2000

_BOOK_COLUMNS = ", ".join(f"p.{column}" for column in allocations.RATE_COLUMNS.values())
_COMMON = f"""
    c.cluster, v.namespace, v.name, c.subscription_uid, o.name, c.hour, c.source,
    c.quantity, c.unit_price_micros, c.amount_micros, c.currency,
    v.namespace_labels, v.subscription_labels, o.namespace, o.uid, o.spec,
    c.covers_start, c.covers_end, p.book_namespace, p.book_name, p.rates_digest, {_BOOK_COLUMNS}
"""
_JOINS = """
    JOIN subscription_versions v ON v.id = c.subscription_version_id
    JOIN offering_versions o ON o.id = c.offering_version_id
    LEFT JOIN pricebooks p ON p.id = c.pricebook_id
"""
SETTLED = """
    WHERE c.cluster = %(cluster)s AND c.hour >= %(start)s AND c.hour < %(end)s
      AND (c.finalized OR %(unsettled)s)
      AND NOT (c.source = 'subscription' AND c.quantity = 0 AND c.amount_micros = 0)
"""
_CHARGES = f"""
    SELECT {_COMMON}, c.finalized, NULL::timestamptz, NULL::timestamptz
    FROM subscription_charges c {_JOINS} {SETTLED}
"""
_CORRECTIONS = f"""
    SELECT {_COMMON}, true, c.booked_in, c.corrects_period
    FROM charge_corrections c {_JOINS}
    WHERE c.cluster = %(cluster)s AND c.booked_in >= %(start)s AND c.booked_in < %(end)s
"""
ONE_NAMESPACE = " AND v.cluster = %(cluster)s AND v.namespace = %(namespace)s"
ORDER = " ORDER BY c.hour, v.namespace, v.name, c.source, c.subscription_uid"
_CORRECTION_ORDER = (
    " ORDER BY c.booked_in, c.hour, v.namespace, v.name, c.source, c.subscription_uid,"
    " c.currency, c.id"
)

_cursor_ids = itertools.count()


def export_query(namespace: str | None = None) -> str:
    """The statement the export reads a window's charges with, of one namespace or all (named
    parameters: cluster, start, end, namespace, unsettled); the export's benchmark runs the
    very same one as a `COPY`."""
    return _CHARGES + (ONE_NAMESPACE if namespace is not None else "") + ORDER


class ExportWindow(TypedDict):
    """The export statements' named parameters: a cluster's hours in [start, end), of one
    namespace (or all, None), with or without the hours still in progress."""

    cluster: str
    start: dt.datetime
    end: dt.datetime
    namespace: str | None
    unsettled: bool


def export_window(
    cluster: str,
    start: dt.datetime,
    end: dt.datetime,
    namespace: str | None = None,
    include_unsettled: bool = False,
) -> ExportWindow:
    """The window every export statement reads; its bounds must be timezone-aware."""
    ticks.require_aware(start=start, end=end)
    return ExportWindow(
        cluster=cluster, start=start, end=end, namespace=namespace, unsettled=include_unsettled
    )


class LedgerReadError(RuntimeError):
    """The ledger could not be read; the message is the server's, never the DSN."""


def _charge(record: tuple[Any, ...]) -> focus.LedgerCharge:
    (cluster, ns, name, uid, offering, hour, source, quantity, price, amount, cur) = record[:11]
    labels, own, off_ns, off_uid, spec, lo, hi, book_ns, book_name, digest = record[11:21]
    rates = record[21 : 21 + len(allocations.RATE_COLUMNS)]
    final, booked_in, corrects = record[21 + len(allocations.RATE_COLUMNS) :]
    book = None if digest is None else price_list(book_ns, book_name, digest, rates)
    booking = None
    if booked_in is not None:
        booking = focus.Booking(booked_in.astimezone(dt.UTC), corrects.astimezone(dt.UTC))
    return focus.LedgerCharge(
        cluster=str(cluster),
        namespace=str(ns),
        subscription=str(name),
        subscription_uid=str(uid),
        offering=str(offering),
        hour=hour.astimezone(dt.UTC),
        source=str(source),
        quantity=Decimal(quantity),
        unit_price_micros=int(price),
        amount_micros=int(amount),
        currency=str(cur),
        finalized=bool(final),
        labels=strings(labels),
        subscription_labels=strings(own),
        offering_namespace=str(off_ns),
        offering_uid=str(off_uid),
        offering_spec=cast(bodies.OfferingSpecBody, spec or {}),
        price_list=book,
        covers=None if lo is None else (lo.astimezone(dt.UTC), hi.astimezone(dt.UTC)),
        booking=booking,
    )


def price_list(book_ns: Any, book_name: Any, digest: Any, rates: Sequence[Any]) -> focus.PriceList:
    """A `pricebooks` row's name, digest and rate columns (in `RATE_COLUMNS` order)."""
    return focus.PriceList(
        str(book_ns),
        str(book_name),
        str(digest),
        dict(zip(allocations.RATE_COLUMNS, (int(r) for r in rates), strict=True)),
    )


def strings(labels: Any) -> dict[str, str]:
    """Labels as read from a JSON column, as strings."""
    return {str(k): str(v) for k, v in (labels or {}).items()}


def charges(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    start: dt.datetime,
    end: dt.datetime,
    namespace: str | None = None,
    batch: int = BATCH,
    include_unsettled: bool = False,
) -> Iterator[focus.LedgerCharge]:
    """Settled charges over hours in [start, end) of one namespace (or all), oldest hour
    first, then the corrections booked in periods starting in [start, end). Fee rows of hours
    that closed no tick are left out; `include_unsettled` adds the hours still in progress.

    Rows arrive `batch` at a time from a server-side cursor. Raises `LedgerReadError` for
    a database failure, on the first row or midway.
    """
    params = export_window(cluster, start, end, namespace, include_unsettled)
    yield from _stream(conn, export_query(namespace), params, batch)
    yield from corrections(
        conn, cluster=cluster, start=start, end=end, namespace=namespace, batch=batch
    )


def corrections(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    start: dt.datetime,
    end: dt.datetime,
    namespace: str | None = None,
    batch: int = BATCH,
) -> Iterator[focus.LedgerCharge]:
    """The corrections booked in periods starting in [start, end), as `charges` ends with."""
    one = ONE_NAMESPACE if namespace is not None else ""
    params = export_window(cluster, start, end, namespace)
    yield from _stream(conn, _CORRECTIONS + one + _CORRECTION_ORDER, params, batch)


def _stream(
    conn: psycopg.Connection[Any], query: str, params: ExportWindow, batch: int
) -> Iterator[focus.LedgerCharge]:
    try:
        with conn.cursor(name=f"finops_focus_{next(_cursor_ids)}") as cur:
            cur.itersize = batch
            cur.execute(query.encode(), params)
            for record in cur:
                yield _charge(record)
    except psycopg.Error as exc:
        raise LedgerReadError(str(exc).strip() or type(exc).__name__) from None


def period_index(conn: psycopg.Connection[Any], *, cluster: str) -> periods.PeriodIndex:
    """Where the cluster's hours are invoiced: its closed periods and its calendar."""
    try:
        closed = store_periods.closed_periods(conn, cluster=cluster)
        calendar = store_periods.calendar_of(conn, cluster=cluster)
    except psycopg.Error as exc:
        raise LedgerReadError(str(exc).strip() or type(exc).__name__) from None
    return periods.PeriodIndex(
        calendar, tuple(periods.Period(p.start, p.end, p.label) for p in closed)
    )
