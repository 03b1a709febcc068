"""Ledger reads and writes that only tests use: row-at-a-time seeding of the two big tables and
one-window sums, the references the set-based product paths are held to.

- `ingest`: allocation rows written in one `COPY` and the product's own upsert statement (the
  allocation run streams instead: `finops.store.allocations.open_stream`/`stage_text`/`merge`);
- `upsert`: charge rows written as given (the charge run writes them set-based,
  `finops.store.charge_sql`);
- `read`, `pricebooks`, `usage_rows`, `priced_usage`: allocation rows and their PriceBook rates
  read back into Python, for the `Fraction` oracle of the charge run;
- `watermark`, `sums`, `sums_by_tenant`, `sums_for_tenant`: one Subscription's watermark and
  one window's sums (the product reads several at once: `watermarks`, `bucket_sums`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import operator
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from finops.billing import allocation, usage
from finops.store import allocations as store_allocations
from finops.store import charge_sql
from finops.store import charges as store_charges
from tests.oracle import charge_rows
from tests.oracle import usage as oracle_usage

_CHARGE_KEY = ("cluster", "subscription_uid", "hour", "source")


def _aware_or_raise(value: dt.datetime, what: str) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware, got {value!r}")


SOURCES = ("subscription", "cpuHour", "gpuHour", "ramGbHour", "pvGbHour", "networkGb")
"""Charge sources: the recurring fee, then the five usage meters (same names as the API)."""


_FINEST = """
    levels AS (
        SELECT DISTINCT ON (hour) hour, aggregation FROM (
            SELECT DISTINCT hour, aggregation FROM provider_allocations
            WHERE cluster = %(cluster)s AND hour >= %(lo)s AND hour < %(hi)s
        ) present
        ORDER BY hour, cardinality(string_to_array(aggregation, ',')) DESC, aggregation
    )
"""


_COLUMNS = """
    a.cluster, a.name, a.namespace, a.aggregation, a.hour, a.start_time, a.end_time,
    a.controller_kind, a.controller_name, a.pod,
    a.cpu_core_usage_average, a.gpu_usage_average, a.ram_byte_usage_average,
    a.pv_byte_hours, a.network_transfer_bytes, a.network_receive_bytes,
    a.pricebook_id, a.currency, a.is_finalized
"""


@dataclasses.dataclass(frozen=True)
class PriceBookRecord:
    """One immutable `pricebooks` row: rates in micros keyed by their `spec.rates` name."""

    id: int
    cluster: str
    book_namespace: str
    book_name: str
    book_uid: str
    currency: str
    rates: Mapping[str, int]


@dataclasses.dataclass(frozen=True)
class StoredAllocation:
    """An allocation row as stored, with the pricing stamp and finalization state."""

    row: allocation.AllocationRow
    pricebook_id: int
    currency: str
    is_finalized: bool


def pricebooks(conn: psycopg.Connection[Any], ids: Collection[int]) -> dict[int, PriceBookRecord]:
    """The `pricebooks` rows with these ids (unknown ids are simply absent)."""
    columns = ", ".join(store_allocations.RATE_COLUMNS.values())
    rows = conn.execute(
        f"""
        SELECT id, cluster, book_namespace, book_name, book_uid, currency, {columns}
        FROM pricebooks WHERE id = ANY(%s)
        """.encode(),
        (list(ids),),
    ).fetchall()
    result: dict[int, PriceBookRecord] = {}
    for row in rows:
        rates = dict(zip(store_allocations.RATE_COLUMNS, (int(v) for v in row[6:]), strict=True))
        result[int(row[0])] = PriceBookRecord(
            int(row[0]), row[1], row[2], row[3], row[4], row[5], rates
        )
    return result


def ingest(
    conn: psycopg.Connection[Any],
    rows: Iterable[allocation.AllocationRow],
    *,
    pricebook_id: int,
    currency: str,
    finalized: bool,
) -> int:
    """Upsert allocation rows stamped with one PriceBook row; return how many rows changed.

    Rows sharing a key within the batch collapse to the last one. A row already finalized
    in the table is left untouched; otherwise the stored row takes the new values and the
    given `finalized` flag. One `COPY` and one `INSERT … ON CONFLICT` per call.
    """
    batch: dict[tuple[str, dt.datetime, str, str, str], allocation.AllocationRow] = {}
    for row in rows:
        _aware_or_raise(row.hour, "AllocationRow.hour")
        _aware_or_raise(row.start, "AllocationRow.start")
        _aware_or_raise(row.end, "AllocationRow.end")
        key = (row.cluster, row.hour.astimezone(dt.UTC), row.namespace, row.name, row.aggregation)
        batch[key] = row
    if not batch:
        return 0
    fields_of = operator.attrgetter(*store_allocations._ROW_COLUMNS)
    labels_at = list(store_allocations._ROW_COLUMNS).index("labels")
    columns = ", ".join(store_allocations._ROW_COLUMNS.values())
    with store_allocations._atomic(conn):
        _prepare_staging(conn)
        with conn.cursor() as cur:
            with cur.copy(
                f"COPY {store_allocations._STAGING} ({columns}) FROM STDIN".encode()
            ) as copy:
                # Key order: concurrent writers then lock conflicting rows in the same order
                # and cannot deadlock each other.
                for key in sorted(batch):
                    row = batch[key]
                    values = list(fields_of(row))
                    values[labels_at] = Jsonb(dict(row.labels))
                    copy.write_row(values)
            cur.execute(
                store_allocations._upsert_sql(store_allocations._STAGING, "%s", ""),
                (pricebook_id, currency, finalized),
            )
            return cur.rowcount


def _prepare_staging(conn: psycopg.Connection[Any]) -> None:
    """An empty session temp table shaped like the allocation columns (created once)."""
    conn.execute(
        f"""
        CREATE TEMP TABLE IF NOT EXISTS {store_allocations._STAGING} ON COMMIT DELETE ROWS AS
        SELECT {", ".join(store_allocations._ROW_COLUMNS.values())}
        FROM provider_allocations WITH NO DATA
        """.encode()
    )
    conn.execute(f"TRUNCATE {store_allocations._STAGING}".encode())


def read(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    start: dt.datetime,
    end: dt.datetime,
    namespaces: Collection[str] | None = None,
) -> list[StoredAllocation]:
    """Rows of hours in [start, end), optionally only these namespaces, in key order."""
    _aware_or_raise(start, "start")
    _aware_or_raise(end, "end")
    columns = ", ".join(store_allocations._ROW_COLUMNS.values())
    query = f"""
        SELECT {columns}, pricebook_id, currency, is_finalized FROM provider_allocations
        WHERE cluster = %s AND hour >= %s AND hour < %s
    """
    params: list[object] = [cluster, start, end]
    if namespaces is not None:
        query += " AND namespace = ANY(%s)"
        params.append(list(namespaces))
    query += f" ORDER BY {', '.join(store_allocations._KEY)}"
    result: list[StoredAllocation] = []
    fields = list(store_allocations._ROW_COLUMNS)
    for record in conn.execute(query.encode(), params).fetchall():
        values = dict(zip(fields, record[: len(fields)], strict=True))
        for key in ("hour", "start", "end"):
            values[key] = _utc(values[key])
        row = allocation.AllocationRow(**values)
        pricebook_id, currency, is_finalized = record[len(fields) :]
        result.append(StoredAllocation(row, int(pricebook_id), currency, bool(is_finalized)))
    return result


def _utc(value: dt.datetime) -> dt.datetime:
    return value.astimezone(dt.UTC)


def _stored(record: tuple[Any, ...], utc: dict[dt.datetime, dt.datetime]) -> StoredAllocation:
    """One row; `utc` remembers converted instants (rows share a handful of them)."""
    hour, start, end = record[4], record[5], record[6]
    row = allocation.AllocationRow(
        cluster=record[0],
        name=record[1],
        namespace=record[2],
        aggregation=record[3],
        hour=utc.get(hour) or utc.setdefault(hour, _utc(hour)),
        start=utc.get(start) or utc.setdefault(start, _utc(start)),
        end=utc.get(end) or utc.setdefault(end, _utc(end)),
        controller_kind=record[7],
        controller_name=record[8],
        pod=record[9],
        cpu_core_usage_average=record[10],
        gpu_usage_average=record[11],
        ram_byte_usage_average=record[12],
        pv_byte_hours=record[13],
        network_transfer_bytes=record[14],
        network_receive_bytes=record[15],
    )
    return StoredAllocation(row, int(record[16]), record[17], bool(record[18]))


def usage_rows(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    namespace_windows: Mapping[str, tuple[dt.datetime, dt.datetime]],
    any_namespace_window: tuple[dt.datetime, dt.datetime] | None = None,
) -> list[StoredAllocation]:
    """Allocation rows at the finest aggregation of their hour, for every namespace's hours
    `[start, end)`, plus every namespace's rows in `any_namespace_window` when given (usage
    sources that name no namespace). Each row once; only the columns the meters read are
    filled (the others keep their defaults)."""
    windows = list(namespace_windows.items())
    bounds = [w for _, w in windows]
    if any_namespace_window is not None:
        bounds.append(any_namespace_window)
    if not bounds:
        return []
    params: dict[str, Any] = {
        "cluster": cluster,
        "lo": min(s for s, _ in bounds),
        "hi": max(e for _, e in bounds),
        "ns": [ns for ns, _ in windows],
        "starts": [s for _, (s, _e) in windows],
        "ends": [e for _, (_s, e) in windows],
    }
    wanted = """
        SELECT a.* FROM provider_allocations a
        JOIN unnest(%(ns)s::text[], %(starts)s::timestamptz[], %(ends)s::timestamptz[])
             AS w(namespace, lo, hi)
          ON a.namespace = w.namespace AND a.hour >= w.lo AND a.hour < w.hi
        WHERE a.cluster = %(cluster)s
    """
    if any_namespace_window is not None:
        params["any_lo"], params["any_hi"] = any_namespace_window
        wanted += """
            UNION
            SELECT a.* FROM provider_allocations a
            WHERE a.cluster = %(cluster)s AND a.hour >= %(any_lo)s AND a.hour < %(any_hi)s
        """
    query = f"""
        WITH {_FINEST}, wanted AS ({wanted})
        SELECT {_COLUMNS} FROM wanted a JOIN levels l USING (hour, aggregation)
        ORDER BY a.hour, a.namespace, a.name
    """
    with conn.cursor() as cur:
        cur.execute(query.encode(), params)
        utc: dict[dt.datetime, dt.datetime] = {}
        return [_stored(r, utc) for r in cur.fetchall()]


def delete_stale(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    windows: Mapping[str, tuple[dt.datetime, dt.datetime]],
    keep: Collection[tuple[str, dt.datetime, str]],
) -> int:
    """Delete non-finalized rows inside each Subscription's recomputed hours `[start, end)`
    whose `(uid, hour, source)` is not in `keep`; finalized rows are never touched."""
    if not windows:
        return 0
    kept = list(keep)
    cur = conn.execute(
        """
        DELETE FROM subscription_charges c
        USING unnest(%s::text[], %s::timestamptz[], %s::timestamptz[]) AS w(uid, lo, hi)
        WHERE c.cluster = %s AND c.subscription_uid = w.uid
          AND c.hour >= w.lo AND c.hour < w.hi AND NOT c.finalized
          AND (c.subscription_uid, c.hour, c.source) NOT IN (
              SELECT * FROM unnest(%b::text[], %b::timestamptz[], %b::text[]))
        """,
        (
            list(windows),
            [s for s, _ in windows.values()],
            [e for _, e in windows.values()],
            cluster,
            [u for u, _, _ in kept],
            [h for _, h, _ in kept],
            [s for _, _, s in kept],
        ),
    )
    return cur.rowcount


def priced_usage(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    namespace_windows: Mapping[str, tuple[dt.datetime, dt.datetime]],
    any_namespace_window: tuple[dt.datetime, dt.datetime] | None,
) -> list[tuple[oracle_usage.PricedRow, str]]:
    """`usage_rows` with the rates of the PriceBook each row was collected under, and its
    currency: one query for the rows, one for their PriceBooks."""
    if not namespace_windows and any_namespace_window is None:
        return []
    stored = usage_rows(
        conn,
        cluster=cluster,
        namespace_windows=namespace_windows,
        any_namespace_window=any_namespace_window,
    )
    books = pricebooks(conn, {s.pricebook_id for s in stored})
    rates = {i: usage.Rates.from_micros(book.rates) for i, book in books.items()}
    return [
        (oracle_usage.PricedRow(s.row, rates.get(s.pricebook_id), s.pricebook_id), s.currency)
        for s in stored
    ]


def upsert(conn: psycopg.Connection[Any], charges: Iterable[charge_rows.ChargeRow]) -> int:
    """Write charge rows in one statement; return how many rows were inserted or changed.

    Rows sharing a key within the batch collapse to the last one. Finalized rows in the
    table are never changed; identical rows are not rewritten.
    """
    batch: dict[tuple[str, str, dt.datetime, str], charge_rows.ChargeRow] = {}
    for charge in charges:
        if charge.hour.tzinfo is None or charge.hour.utcoffset() is None:
            raise ValueError(f"ChargeRow.hour must be timezone-aware, got {charge.hour!r}")
        if charge.source not in SOURCES:
            raise ValueError(f"unknown charge source {charge.source!r}")
        key = (
            charge.cluster,
            charge.subscription_uid,
            charge.hour.astimezone(dt.UTC),
            charge.source,
        )
        batch[key] = charge
    if not batch:
        return 0
    # Key order: concurrent writers lock conflicting rows in the same order (no deadlock).
    ordered = [batch[k] for k in sorted(batch)]
    arrays = [[getattr(c, name) for c in ordered] for name in store_charges.COLUMNS]
    unnest = ", ".join(f"%s::{t}[]" for t in charge_sql._STAGE_TYPES)
    assignments = ", ".join(f"{c} = EXCLUDED.{c}" for c in store_charges.UPDATED)
    mine = ", ".join(f"subscription_charges.{c}" for c in store_charges.UPDATED)
    theirs = ", ".join(f"EXCLUDED.{c}" for c in store_charges.UPDATED)
    cur = conn.execute(
        f"""
        INSERT INTO subscription_charges ({", ".join(store_charges.COLUMNS)})
        SELECT * FROM unnest({unnest})
        ON CONFLICT ({", ".join(_CHARGE_KEY)}) DO UPDATE SET {assignments}
        WHERE NOT subscription_charges.finalized
          AND ({mine}) IS DISTINCT FROM ({theirs})
        """.encode(),
        arrays,
    )
    return cur.rowcount


def watermark(
    conn: psycopg.Connection[Any], *, cluster: str, subscription_uid: str
) -> dt.datetime | None:
    """`watermarks` for one Subscription; None when nothing is finalized yet."""
    return store_charges.watermarks(
        conn, cluster=cluster, subscription_uids=[subscription_uid]
    ).get(subscription_uid)


def sums(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    subscription_uids: Collection[str],
    start: dt.datetime,
    end: dt.datetime,
) -> dict[str, dict[str, int]]:
    """Micros charged per Subscription and source over hours in [start, end).

    Finalized and in-progress rows both count. Sources with no rows are absent, as are
    Subscriptions with none. The charge run reads its buckets' `current` through
    `bucket_sums`, three windows at once from the month and day sums and the rows from the
    hour on; this one-window sum of the rows is what tests hold it to.
    """
    for value, what in ((start, "start"), (end, "end")):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{what} must be timezone-aware, got {value!r}")
    rows = conn.execute(
        """
        SELECT subscription_uid, source, sum(amount_micros) FROM subscription_charges
        WHERE cluster = %s AND subscription_uid = ANY(%b) AND hour >= %s AND hour < %s
        GROUP BY subscription_uid, source
        """,
        (cluster, list(subscription_uids), start, end),
    ).fetchall()
    result: dict[str, dict[str, int]] = {}
    for uid, source, total in rows:
        result.setdefault(str(uid), {})[str(source)] = int(total)
    return result


def sums_by_tenant(
    conn: psycopg.Connection[Any], *, cluster: str, start: dt.datetime, end: dt.datetime
) -> dict[str | None, dict[str, int]]:
    """Micros per `stakater.com/tenant` label and source over hours in [start, end).

    Each charge counts under the tenant its Subscription's namespace carried in the version
    that priced it; None collects charges from unlabelled namespaces.
    """
    rows = conn.execute(
        """
        SELECT v.namespace_labels ->> 'stakater.com/tenant', c.source, sum(c.amount_micros)
        FROM subscription_charges c
        JOIN subscription_versions v ON v.id = c.subscription_version_id
        WHERE c.cluster = %s AND c.hour >= %s AND c.hour < %s
        GROUP BY 1, 2
        """,
        (cluster, start, end),
    ).fetchall()
    result: dict[str | None, dict[str, int]] = {}
    for tenant, source, total in rows:
        result.setdefault(tenant, {})[str(source)] = int(total)
    return result


def sums_for_tenant(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    tenant: str,
    start: dt.datetime,
    end: dt.datetime,
) -> dict[str, int]:
    """Micros per source charged to one tenant over [start, end) (uses the tenant index)."""
    rows = conn.execute(
        """
        SELECT c.source, sum(c.amount_micros)
        FROM subscription_versions v
        JOIN subscription_charges c ON c.subscription_version_id = v.id
        WHERE v.namespace_labels ->> 'stakater.com/tenant' = %s
          AND c.cluster = %s AND c.hour >= %s AND c.hour < %s
        GROUP BY c.source
        """,
        (tenant, cluster, start, end),
    ).fetchall()
    return {str(source): int(total) for source, total in rows}
