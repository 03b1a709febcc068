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
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import psycopg

from finops.billing import focus

BATCH = 2000

_SELECT = """
    SELECT c.cluster, v.namespace, v.name, c.subscription_uid, o.name, c.hour, c.source,
           c.quantity, c.unit_price_micros, c.amount_micros, c.currency, c.finalized,
           v.namespace_labels, v.subscription_labels
    FROM subscription_charges c
    JOIN subscription_versions v ON v.id = c.subscription_version_id
    JOIN offering_versions o ON o.id = c.offering_version_id
    WHERE c.cluster = %(cluster)s AND c.hour >= %(start)s AND c.hour < %(end)s
"""
_ONE_NAMESPACE = " AND v.cluster = %(cluster)s AND v.namespace = %(namespace)s"
_ORDER = " ORDER BY c.hour, v.namespace, v.name, c.source, c.subscription_uid"

_cursor_ids = itertools.count()


class LedgerReadError(RuntimeError):
    """The ledger could not be read; the message is the server's, never the DSN."""


def _charge(record: tuple[Any, ...]) -> focus.LedgerCharge:
    cluster, ns, name, uid, offering, hour, source, quantity, price, amount, cur, final = record[
        :-2
    ]
    labels, own = record[-2:]
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
        labels=_strings(labels),
        subscription_labels=_strings(own),
    )


def _strings(labels: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (labels or {}).items()}


def charges(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    start: dt.datetime,
    end: dt.datetime,
    namespace: str | None = None,
    batch: int = BATCH,
) -> Iterator[focus.LedgerCharge]:
    """Charges over hours in [start, end) of one namespace (or all), oldest hour first.

    Rows arrive `batch` at a time from a server-side cursor. Raises `LedgerReadError` for
    a database failure, on the first row or midway.
    """
    for value, what in ((start, "start"), (end, "end")):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{what} must be timezone-aware, got {value!r}")
    query = _SELECT + (_ONE_NAMESPACE if namespace is not None else "") + _ORDER
    params = {"cluster": cluster, "start": start, "end": end, "namespace": namespace}
    try:
        with conn.cursor(name=f"finops_focus_{next(_cursor_ids)}") as cur:
            cur.itersize = batch
            cur.execute(query.encode(), params)
            for record in cur:
                yield _charge(record)
    except psycopg.Error as exc:
        raise LedgerReadError(str(exc).strip() or type(exc).__name__) from None
